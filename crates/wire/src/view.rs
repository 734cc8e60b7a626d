//! The boilerplate every fixed-length header view shares.

/// Declares a zero-copy view `$name<T: AsRef<[u8]>>` over a header of `$len` bytes.
macro_rules! fixed_view {
    ($(#[$meta:meta])* $name:ident, $len:expr, $layer:expr) => {
        $(#[$meta])*
        ///
        /// After `new_checked` succeeds no accessor panics.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of the header in bytes.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking it; accessors may panic on a short buffer.
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wraps a buffer after checking it holds the whole header.
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// Checks that the buffer holds the whole header.
            pub fn check_len(&self) -> $crate::Result<()> {
                $crate::error::need($layer, self.buffer.as_ref(), $len)
            }

            /// Gives the buffer back.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

pub(crate) use fixed_view;
