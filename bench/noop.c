/* The static no-op workload of bench/server.sh (built with cc -static -O2):
 * a process with no dynamic loader and nothing to do. */
int main(void) { return 0; }
