/* Attack 9: kernel keyrings. usage: keyring DESCRIPTION */
#include "hostile.h"
#include <linux/keyctl.h>

int main(int argc, char **argv) {
    const char *desc = argc > 1 ? argv[1] : "capsule-hostile";
    surface("keyctl-get-session", syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0));
    surface("keyctl-get-user", syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0));
    surface("add_key-session", syscall(SYS_add_key, "user", desc, "secret", 6, KEY_SPEC_SESSION_KEYRING));
    surface("add_key-user", syscall(SYS_add_key, "user", desc, "secret", 6, KEY_SPEC_USER_KEYRING));
    surface("request_key", syscall(SYS_request_key, "user", desc, NULL, KEY_SPEC_SESSION_KEYRING));
    surface("keyctl-join-session", syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL));
    DONE();
    return 0;
}
