// Wrong answer, and then killed by SIGPIPE: it writes its guesses without
// reading the replies, and the first one, 0, is out of range. The
// interactor rejects it and leaves first; the solution then dies of
// SIGPIPE writing to it. capsule knows who left first: WA, not RE.
#include <cstdio>

int main() {
    long long n;
    if (scanf("%lld", &n) != 1) return 1;
    for (long long x = 0;; x++) {
        printf("%lld\n", x);
        fflush(stdout);
    }
}
