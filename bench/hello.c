/* The program bench/server.sh compiles with `gcc -O2` as a workload. */
#include <stdio.h>

int main(void) {
    puts("hello, world");
    return 0;
}
