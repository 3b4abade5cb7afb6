// Wrong answer: guesses 1, 2, 3, ... Fine for tiny n or a secret of 1;
// otherwise the interactor stops it after its allowed number of guesses.
#include <iostream>
#include <string>

int main() {
    long long n;
    std::cin >> n;
    for (long long x = 1; x <= n; x++) {
        std::cout << x << std::endl;
        std::string reply;
        if (!(std::cin >> reply) || reply == "=") return 0;
    }
}
