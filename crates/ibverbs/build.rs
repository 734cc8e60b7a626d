//! Links the shim under rdma-core's soname and with its symbol versions.
//!
//! The versions themselves are attached in `src/exports.rs` (`.symver` directives); the version
//! script here only declares the version nodes, which the linker needs to define them. rustc
//! passes a version script of its own (an anonymous one listing the exported names); LLD, the
//! linker rustc uses on x86_64 Linux, accepts both, where GNU ld refuses the combination.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=versions.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/versions.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
}
