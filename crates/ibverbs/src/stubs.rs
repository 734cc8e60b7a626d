//! The direct verbs of the provider libraries perftest links (`libmlx5.so.1`,
//! `libefa.so.1`). A program linked with them resolves every symbol when it loads, so the
//! shim stands in for those sonames too (`irn exec` links them to this library); programs
//! call these only for an mlx5 or EFA device, which an irn device is not, and each refuses
//! with `EOPNOTSUPP`.

use std::ffi::{c_int, c_void};

use crate::errno;

macro_rules! refuse_null {
    ($($name:ident($($arg:ident),*)),* $(,)?) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: *mut c_void),*) -> *mut c_void {
            $(let _ = $arg;)*
            errno::null(errno::EOPNOTSUPP)
        }
    )*};
}

macro_rules! refuse_int {
    ($($name:ident($($arg:ident),*)),* $(,)?) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: *mut c_void),*) -> c_int {
            $(let _ = $arg;)*
            errno::set(errno::EOPNOTSUPP);
            errno::EOPNOTSUPP
        }
    )*};
}

refuse_null! {
    irn_mlx5dv_open_device(device, attr),
    irn_mlx5dv_create_qp(context, qp_attr, mlx5_qp_attr),
    irn_mlx5dv_qp_ex_from_ibv_qp_ex(qp),
    irn_mlx5dv_create_mkey(attr),
    irn_mlx5dv_dek_create(context, attr),
    irn_efadv_create_qp_ex(context, attr, efa_attr, inlen),
}

refuse_int! {
    irn_mlx5dv_destroy_mkey(mkey),
    irn_mlx5dv_devx_general_cmd(context, input, inlen, out, outlen),
    irn_mlx5dv_crypto_login(context, attr),
    irn_mlx5dv_dek_destroy(dek),
    irn_efadv_query_device(context, attr, inlen),
}
