//! The rest of librdmacm's API, which irn does not offer: each call refuses.

use super::*;

// The rest of librdmacm's API that irn does not offer: the synchronous helpers built on a
// NULL channel, device enumeration, multicast, SRQs, ID migration. Each refuses.
macro_rules! refuse {
    ($($name:ident($($arg:ident),*)),* $(,)?) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: *mut c_void),*) -> c_int {
            $(let _ = $arg;)*
            fail(errno::EOPNOTSUPP)
        }
    )*};
}

refuse! {
    irn_rdma_create_ep(id, res, pd, attr),
    irn_rdma_get_request(listen, id),
    irn_rdma_migrate_id(id, channel),
    irn_rdma_notify(id, event),
    irn_rdma_join_multicast(id, addr, context),
    irn_rdma_leave_multicast(id, addr),
    irn_rdma_create_srq(id, pd, attr),
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_destroy_ep(_id: *mut c_void) {}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_destroy_srq(_id: *mut c_void) {}

/// No device list: programs open devices through libibverbs (`rdma_get_devices` returns NULL,
/// as it does when no device is present).
#[no_mangle]
pub unsafe extern "C" fn irn_rdma_get_devices(num: *mut c_int) -> *mut *mut ibv_context {
    if !num.is_null() {
        // SAFETY: the caller's out pointer.
        unsafe { num.write(0) };
    }
    errno::null(errno::EOPNOTSUPP)
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_free_devices(_list: *mut *mut ibv_context) {}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_init_qp_attr(
    _id: *mut rdma_cm_id,
    _attr: *mut ibv_qp_attr,
    _mask: *mut c_int,
) -> c_int {
    fail(errno::EOPNOTSUPP)
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_establish(_id: *mut rdma_cm_id) -> c_int {
    fail(errno::EOPNOTSUPP)
}

/// rsockets are not offered.
#[no_mangle]
pub unsafe extern "C" fn irn_rpoll(_fds: *mut c_void, _n: c_int, _timeout: c_int) -> c_int {
    fail(libc::ENOSYS)
}
