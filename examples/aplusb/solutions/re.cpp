// Runtime error: writes through a null pointer (SIGSEGV).
#include <iostream>

int main() {
    long long a, b;
    std::cin >> a >> b;
    volatile long long *p = nullptr;
    *p = a + b;
    std::cout << *p << "\n";
}
