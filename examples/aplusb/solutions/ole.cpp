// Output limit exceeded: writes forever.
#include <iostream>

int main() {
    std::ios::sync_with_stdio(false);
    for (;;) std::cout << "11111111111111111111111111111111111111111111111111111111111111\n";
}
