// Wrong answer: int overflows on the larger tests (the first ones pass).
#include <iostream>

int main() {
    int a, b;
    std::cin >> a >> b;
    std::cout << a + b << "\n";
}
