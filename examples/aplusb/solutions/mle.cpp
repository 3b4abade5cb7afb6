// Memory limit exceeded: allocates and touches 512 MiB, then answers
// correctly (so only the memory limit can fail it).
#include <iostream>
#include <vector>

int main() {
    long long a, b;
    std::cin >> a >> b;
    std::vector<char> v(std::size_t(512) << 20, 1);  // every page written
    long long pages = 0;
    for (std::size_t i = 0; i < v.size(); i += 4096) pages += v[i];
    std::cout << a + b + pages - (long long)(v.size() / 4096) << "\n";
}
