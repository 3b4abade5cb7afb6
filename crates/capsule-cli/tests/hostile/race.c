/* Attack 19 (the program side; the attack is the harness's symlink swap):
 * prints the file argv[1]. */
#include "hostile.h"
int main(int argc, char **argv) {
    char b[4096];
    int fd = open(argc > 1 ? argv[1] : "/mnt/marker", O_RDONLY);
    if (fd < 0) { out("INFO open %s", en(errno)); return 1; }
    ssize_t n = read(fd, b, sizeof b);
    if (n > 0) (void)!write(1, b, n);
    return 0;
}
