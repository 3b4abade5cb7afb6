// Runtime error: reads n, then crashes (SIGSEGV) before its first guess.
// The interactor then sees the conversation end and says wrong answer, but
// the solution left first: RE, not WA.
#include <iostream>

int main() {
    long long n;
    std::cin >> n;
    volatile long long *p = nullptr;
    *p = n;
    std::cout << n / 2 << std::endl;
}
