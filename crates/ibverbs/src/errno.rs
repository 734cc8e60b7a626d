//! `errno` and the error numbers verbs return.

pub use libc::{EINVAL, ENOMEM, EOPNOTSUPP};

/// Sets the calling thread's `errno`.
pub fn set(e: i32) {
    // SAFETY: `__errno_location` returns the calling thread's errno, always valid to write.
    unsafe { *libc::__errno_location() = e }
}

/// Sets `errno` to `e` and returns a null pointer: how a verb that creates something fails.
pub fn null<T>(e: i32) -> *mut T {
    set(e);
    std::ptr::null_mut()
}

/// The error number a runtime error stands for.
pub fn of(e: &irn_verbs::Error) -> i32 {
    use irn_verbs::Error as E;
    match e {
        E::Io(io) => io.raw_os_error().unwrap_or(libc::EIO),
        E::QueueFull | E::CqFull(_) => ENOMEM,
        E::CqOverrun(_) => libc::EOVERFLOW,
        _ => EINVAL,
    }
}
