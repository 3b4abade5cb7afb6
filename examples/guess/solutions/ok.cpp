// Accepted: binary search, at most as many guesses as n has binary digits.
#include <iostream>
#include <string>

int main() {
    long long n;
    std::cin >> n;
    long long lo = 1, hi = n;
    while (lo <= hi) {
        long long mid = lo + (hi - lo) / 2;
        std::cout << mid << std::endl;  // endl flushes: the interactor is waiting
        std::string reply;
        if (!(std::cin >> reply)) return 1;
        if (reply == "=") return 0;
        if (reply == "<") hi = mid - 1;
        else lo = mid + 1;
    }
    return 1;
}
