/* Attack 17: prints how much argv and environment arrived. */
#include "hostile.h"
extern char **environ;
int main(int argc, char **argv) {
    size_t ab = 0, eb = 0, en_ = 0, longest = 0;
    for (int i = 0; i < argc; i++) { size_t l = strlen(argv[i]) + 1; ab += l; if (l > longest) longest = l; }
    for (char **e = environ; *e; e++) { size_t l = strlen(*e) + 1; eb += l; en_++; if (l > longest) longest = l; }
    out("ARGS argc=%d argbytes=%zu envc=%zu envbytes=%zu longest=%zu", argc, ab, en_, eb, longest);
    DONE();
    return 0;
}
