//! librdmacm (`librdmacm.so.1`): connection management by IP address and port.

use std::ffi::{c_int, c_void};

use crate::errno;

macro_rules! refuse_int {
    ($($name:ident($($arg:ident),*)),* $(,)?) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: *mut c_void),*) -> c_int {
            $(let _ = $arg;)*
            errno::set(libc::ENOSYS);
            -1
        }
    )*};
}

refuse_int! {
    irn_rdma_accept(id, param), irn_rdma_ack_cm_event(ev), irn_rdma_bind_addr(id, addr),
    irn_rdma_connect(id, param), irn_rdma_create_id(ch, id, ctx, ps),
    irn_rdma_create_qp(id, pd, attr), irn_rdma_create_qp_ex(id, attr),
    irn_rdma_destroy_id(id), irn_rdma_disconnect(id), irn_rdma_get_cm_event(ch, ev),
    irn_rdma_getaddrinfo(node, service, hints, res), irn_rdma_listen(id, backlog),
    irn_rdma_reject(id, data, len), irn_rdma_resolve_addr(id, src, dst, ms),
    irn_rdma_resolve_route(id, ms), irn_rdma_set_option(id, level, name, val, len),
    irn_rpoll(fds, n, timeout), irn_rdma_establish(id), irn_rdma_init_qp_attr(id, attr, mask),
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_create_event_channel() -> *mut c_void {
    errno::null(libc::ENOSYS)
}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_destroy_event_channel(_ch: *mut c_void) {}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_destroy_qp(_id: *mut c_void) {}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_freeaddrinfo(_res: *mut c_void) {}

#[no_mangle]
pub unsafe extern "C" fn irn_rdma_event_str(_e: c_int) -> *const std::ffi::c_char {
    c"UNKNOWN EVENT".as_ptr()
}
