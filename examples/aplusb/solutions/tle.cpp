// Time limit exceeded: reads the input, then spins.
#include <iostream>

int main() {
    long long a, b;
    std::cin >> a >> b;
    volatile unsigned long long spins = 0;
    for (;;) spins = spins + 1;
}
