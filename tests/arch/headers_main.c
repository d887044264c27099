/* The check of the public headers is that header_alone_*.c compile; the
 * test only has to run. */
int main(void) { return 0; }
