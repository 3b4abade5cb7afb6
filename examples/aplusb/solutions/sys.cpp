// Forbidden system call: opens a socket, which the strict seccomp policy
// of the C++ preset does not allow (verdict SYS, naming `socket`).
#include <sys/socket.h>
#include <iostream>

int main() {
    long long a, b;
    std::cin >> a >> b;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    std::cout << a + b + (fd < 0 ? 0 : 0) << "\n";
}
