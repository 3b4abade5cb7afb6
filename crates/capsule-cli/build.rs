//! Links the front end (`capsule`, src/front.rs) without a C library: its
//! own `_start`, no start files, no libc, a static executable that needs
//! no relocation at start (the objects are position-independent code, so
//! the linker resolves everything itself).
fn main() {
    for arg in ["-nostartfiles", "-nostdlib", "-static", "-no-pie", "-Wl,--gc-sections"] {
        println!("cargo:rustc-link-arg-bin=capsule={arg}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
