//! Devices and contexts: `ibv_get_device_list` … `ibv_close_device`, and the queries.
//!
//! The device list is made once per process from [`Config`]; its `ibv_device`s live as long
//! as the process (a program may keep a device pointer after freeing the list, as rdma-core
//! allows). Every context of one device shares one runtime device — one socket on the
//! device's address — so a program may open a device twice (librdmacm does, beside the
//! program's own context).

use std::ffi::{c_char, c_int, c_void};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use irn_verbs::{Device, DeviceConfig, Gid, Impairment};

use crate::abi::*;
use crate::config::{Config, ConfigError, DeviceSpec};
use crate::errno;

/// The process's devices, made at the first `ibv_get_device_list`.
pub(crate) struct Registry {
    pub config: Result<Config, ConfigError>,
    pub devices: Vec<&'static DeviceEntry>,
}

/// One device: the C structure programs see first, then what the shim keeps.
#[repr(C)]
pub(crate) struct DeviceEntry {
    pub c: ibv_device,
    pub spec: DeviceSpec,
    pub index: usize,
    /// Its port's MTU (bytes) and speed (bits per second).
    pub mtu: u32,
    pub speed_bps: u64,
    /// The runtime device while a context holds it.
    open: Mutex<Weak<Device>>,
}

// SAFETY: the raw pointers in `c` (`_ops`) are null and never followed; everything else is
// Sync.
unsafe impl Sync for DeviceEntry {}
// SAFETY: as above.
unsafe impl Send for DeviceEntry {}

static REGISTRY: OnceLock<Registry> = OnceLock::new();

pub(crate) fn registry() -> &'static Registry {
    REGISTRY.get_or_init(|| {
        let config = Config::from_env();
        let devices = match &config {
            Ok(c) => c
                .devices
                .iter()
                .enumerate()
                .map(|(i, spec)| &*Box::leak(Box::new(DeviceEntry::new(i, spec.clone()))))
                .collect(),
            Err(e) => {
                eprintln!("irn libibverbs: {e}; no devices");
                Vec::new()
            }
        };
        Registry { config, devices }
    })
}

/// The configuration, once the registry holds one (a context exists only then).
pub(crate) fn config() -> &'static Config {
    match &registry().config {
        Ok(c) => c,
        Err(_) => unreachable!("contexts are opened only from a valid configuration"),
    }
}

fn copy_name(dst: &mut [c_char], s: &str) {
    let room = dst.len() - 1;
    for (d, b) in dst.iter_mut().zip(s.bytes().take(room)) {
        *d = b as c_char;
    }
}

impl DeviceEntry {
    fn new(index: usize, spec: DeviceSpec) -> DeviceEntry {
        let mut c = ibv_device {
            _ops: [std::ptr::null_mut(); 2],
            node_type: IBV_NODE_CA,
            transport_type: IBV_TRANSPORT_IB,
            name: [0; 64],
            dev_name: [0; 64],
            dev_path: [0; 256],
            ibdev_path: [0; 256],
        };
        copy_name(&mut c.name, &spec.name);
        copy_name(&mut c.dev_name, &format!("uverbs-irn{index}"));
        let (mtu, speed_bps) = port_of(spec.addr);
        DeviceEntry {
            c,
            spec,
            index,
            mtu,
            speed_bps,
            open: Mutex::new(Weak::new()),
        }
    }

    /// The GID of its one port's one entry: its address, IPv4-mapped for IPv4 (RoCEv2,
    /// IBTA Vol. 1 annex A17.4.5.1).
    pub fn gid(&self) -> ibv_gid {
        ibv_gid {
            raw: Gid::from(self.spec.addr).0,
        }
    }

    /// A node GUID made from the address (EUI-64 style: a locally administered prefix, then
    /// the address's last bytes), stable across runs.
    pub fn guid(&self) -> u64 {
        let g = self.gid().raw;
        u64::from_be_bytes([0x02, 0x1d, g[10], g[11], g[12], g[13], g[14], g[15]])
    }

    /// The runtime device, opened if no context holds it.
    fn device(&self) -> Result<Arc<Device>, irn_verbs::Error> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = open.upgrade() {
            return Ok(d);
        }
        let cfg = config();
        let mut dc = DeviceConfig::new(self.spec.addr);
        dc.port = cfg.port;
        dc.tx_impairment = Impairment::loss(cfg.loss);
        dc.seed = cfg.seed.wrapping_add(self.index as u64);
        dc.busy_poll = cfg.busy_poll;
        // Its waits are `ibv_poll_cq`'s after empty polls: without them (`IRN_IBV_POLL_WAIT_US=0`)
        // no wait would drive the device, and the engine would stand back after each poll that
        // found a completion.
        dc.wait_drives = cfg.wait_drives && !cfg.poll_wait.is_zero();
        // The configuration refuses both without an interface (`config.rs`).
        if let Some(iface) = &self.spec.iface {
            if cfg.pause {
                dc.pause_iface = Some(iface.clone());
            }
            dc.vlan = cfg.vlan.map(|vid| irn_verbs::Vlan {
                iface: iface.clone(),
                vid,
            });
        }
        let d = Arc::new(Device::open(dc)?);
        *open = Arc::downgrade(&d);
        Ok(d)
    }
}

/// The MTU of the interface holding `addr` fitted to IB's sizes (its IP, UDP, BTH, RETH and
/// ICRC inside), and its speed; 1024 bytes and 10 Gb/s when the interface is not found.
fn port_of(addr: IpAddr) -> (u32, u64) {
    let iface = interface_of(addr);
    let read = |what: &str| -> Option<u64> {
        let name = iface.as_deref()?;
        std::fs::read_to_string(format!("/sys/class/net/{name}/{what}"))
            .ok()?
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|&v| v > 0)
            .map(|v| v as u64)
    };
    let headers = if addr.is_ipv4() { 60 } else { 80 };
    let mtu = read("mtu").map_or(1024, |m| {
        [4096, 2048, 1024, 512]
            .into_iter()
            .find(|&ib| u64::from(ib) + headers <= m)
            .unwrap_or(256)
    });
    let speed = read("speed").map_or(10_000_000_000, |mbps| mbps * 1_000_000);
    (mtu, speed)
}

/// The interface an address belongs to (127.0.0.0/8 is the loopback's whatever address it
/// is configured with).
fn interface_of(addr: IpAddr) -> Option<String> {
    crate::config::interfaces()
        .into_iter()
        .find(|i| {
            i.addrs.iter().any(|&a| {
                a == addr
                    || (a.is_loopback() && addr.is_loopback() && a.is_ipv4() == addr.is_ipv4())
            })
        })
        .map(|i| i.name)
}

/// A context: the C structure first, so that a program's `struct ibv_context *` is a
/// pointer to this.
#[repr(C)]
pub(crate) struct Context {
    pub c: ibv_context,
    pub entry: &'static DeviceEntry,
    pub dev: Arc<Device>,
    /// The read end is `c.async_fd`: no asynchronous event is ever written, so
    /// `ibv_get_async_event` waits (as on a device without faults) until the context closes.
    async_read: OwnedFd,
    async_write: Option<OwnedFd>,
}

impl Context {
    /// # Safety
    /// `ctx` is a context this library opened and has not closed.
    pub unsafe fn from_c<'a>(ctx: *mut ibv_context) -> &'a Context {
        // SAFETY: `c` is the first field of the repr(C) Context, per the caller's contract.
        unsafe { &*(ctx as *const Context) }
    }
}

pub(crate) fn new_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    use std::os::fd::FromRawFd;
    // SAFETY: both descriptors are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn ops() -> ibv_context_ops {
    let null = std::ptr::null_mut();
    ibv_context_ops {
        _compat_query_device: null,
        _compat_query_port: null,
        _compat_alloc_pd: null,
        _compat_dealloc_pd: null,
        _compat_reg_mr: null,
        _compat_rereg_mr: null,
        _compat_dereg_mr: null,
        alloc_mw: null,
        bind_mw: null,
        dealloc_mw: null,
        _compat_create_cq: null,
        poll_cq: Some(crate::objects::poll_cq),
        req_notify_cq: Some(crate::objects::req_notify_cq),
        _compat_cq_event: null,
        _compat_resize_cq: null,
        _compat_destroy_cq: null,
        _compat_create_srq: null,
        _compat_modify_srq: null,
        _compat_query_srq: null,
        _compat_destroy_srq: null,
        post_srq_recv: Some(crate::objects::post_srq_recv),
        _compat_create_qp: null,
        _compat_query_qp: null,
        _compat_modify_qp: null,
        _compat_destroy_qp: null,
        post_send: Some(crate::qp::post_send),
        post_recv: Some(crate::qp::post_recv),
        _compat_create_ah: null,
        _compat_destroy_ah: null,
        _compat_attach_mcast: null,
        _compat_detach_mcast: null,
        _compat_async_event: null,
    }
}

/// The entry behind a device pointer from the list, or `None` for a pointer that is not one.
fn entry_of(device: *mut ibv_device) -> Option<&'static DeviceEntry> {
    registry()
        .devices
        .iter()
        .copied()
        .find(|e| std::ptr::eq(&e.c, device))
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    let reg = registry();
    let mut list: Vec<*mut ibv_device> = reg
        .devices
        .iter()
        .map(|e| &e.c as *const ibv_device as *mut ibv_device)
        .collect();
    if !num.is_null() {
        // SAFETY: the caller passes a valid int or NULL.
        unsafe { *num = list.len() as c_int };
    }
    if reg.config.is_err() {
        errno::set(errno::EINVAL);
    }
    list.push(std::ptr::null_mut());
    Box::into_raw(list.into_boxed_slice()) as *mut *mut ibv_device
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_free_device_list(list: *mut *mut ibv_device) {
    if list.is_null() {
        return;
    }
    let mut n = 0;
    // SAFETY: `list` is a NULL-terminated array ibv_get_device_list returned.
    while !unsafe { *list.add(n) }.is_null() {
        n += 1;
    }
    // SAFETY: it was a boxed slice of n + 1 pointers.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n + 1)) });
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    match entry_of(device) {
        Some(e) => e.c.name.as_ptr(),
        None => errno::null(errno::EINVAL),
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    entry_of(device).map_or(0, |e| e.guid().to_be())
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_get_device_index(device: *mut ibv_device) -> c_int {
    entry_of(device).map_or(-1, |e| e.index as c_int)
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    let Some(entry) = entry_of(device) else {
        return errno::null(errno::EINVAL);
    };
    let dev = match entry.device() {
        Ok(d) => d,
        Err(e) => {
            eprintln!(
                "irn libibverbs: {} on {}:{}: {e}",
                entry.spec.name,
                entry.spec.addr,
                config().port
            );
            return errno::null(errno::of(&e));
        }
    };
    let (async_read, async_write) = match new_pipe() {
        Ok(p) => p,
        Err(e) => return errno::null(e.raw_os_error().unwrap_or(errno::ENOMEM)),
    };
    let ctx = Box::new(Context {
        c: ibv_context {
            device,
            ops: ops(),
            cmd_fd: -1,
            async_fd: async_read.as_raw_fd(),
            num_comp_vectors: 1,
            // SAFETY: an all-zero pthread mutex is PTHREAD_MUTEX_INITIALIZER (glibc).
            mutex: unsafe { std::mem::zeroed() },
            abi_compat: std::ptr::null_mut(),
        },
        entry,
        dev,
        async_read,
        async_write: Some(async_write),
    });
    Box::into_raw(ctx) as *mut ibv_context
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_close_device(ctx: *mut ibv_context) -> c_int {
    if ctx.is_null() {
        return errno::EINVAL;
    }
    // SAFETY: a context ibv_open_device returned, closed once (the verbs contract).
    let mut ctx = unsafe { Box::from_raw(ctx as *mut Context) };
    // Closing the write end wakes a thread blocked in ibv_get_async_event.
    ctx.async_write = None;
    0
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_query_device(
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    if ctx.is_null() || attr.is_null() {
        return errno::EINVAL;
    }
    // SAFETY: an open context.
    let ctx = unsafe { Context::from_c(ctx) };
    let mut a = ibv_device_attr {
        fw_ver: [0; 64],
        node_guid: ctx.entry.guid().to_be(),
        sys_image_guid: ctx.entry.guid().to_be(),
        max_mr_size: 1 << 40,
        page_size_cap: 0xffff_f000,
        vendor_id: 0,
        vendor_part_id: 0,
        hw_ver: 0,
        max_qp: 1 << 16,
        max_qp_wr: 1 << 15,
        device_cap_flags: IBV_DEVICE_RC_RNR_NAK_GEN,
        max_sge: 32,
        max_sge_rd: 32,
        max_cq: 1 << 16,
        max_cqe: 1 << 20,
        max_mr: 1 << 20,
        max_pd: 1 << 16,
        max_qp_rd_atom: 16,
        max_ee_rd_atom: 0,
        max_res_rd_atom: 1 << 16,
        max_qp_init_rd_atom: 16,
        max_ee_init_rd_atom: 0,
        atomic_cap: IBV_ATOMIC_HCA,
        max_ee: 0,
        max_rdd: 0,
        max_mw: 0,
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: 0,
        max_mcast_qp_attach: 0,
        max_total_mcast_qp_attach: 0,
        max_ah: 1 << 16,
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: 0,
        max_srq_wr: 0,
        max_srq_sge: 0,
        max_pkeys: 1,
        local_ca_ack_delay: 15,
        phys_port_cnt: 1,
    };
    copy_name(&mut a.fw_ver, concat!("irn ", env!("CARGO_PKG_VERSION")));
    // SAFETY: the caller's buffer for one ibv_device_attr.
    unsafe { attr.write(a) };
    0
}

/// `IBV_MTU_256` … `IBV_MTU_4096` (1 … 5).
pub(crate) fn mtu_enum(bytes: u32) -> u32 {
    match bytes {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    }
}

/// IB's link width and speed codes nearest a link's rate (`ibv_port_attr`'s `active_width`,
/// `active_speed`): 4X lanes at 10, 25 or 50 Gb/s each above 40 Gb/s, one lane below.
fn width_speed(bps: u64) -> (u8, u8) {
    let gbps = bps / 1_000_000_000;
    let (width, lane) = if gbps >= 40 { (2, gbps / 4) } else { (1, gbps) };
    let speed = match lane {
        0..=2 => 1,
        3..=5 => 2,
        6..=10 => 4,
        11..=14 => 16,
        15..=25 => 32,
        26..=50 => 64,
        _ => 128,
    };
    (width, speed)
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    if ctx.is_null() || attr.is_null() || port != 1 {
        return errno::EINVAL;
    }
    // SAFETY: an open context.
    let ctx = unsafe { Context::from_c(ctx) };
    let mtu = mtu_enum(ctx.entry.mtu);
    let (active_width, active_speed) = width_speed(ctx.entry.speed_bps);
    let a = ibv_port_attr {
        state: IBV_PORT_ACTIVE,
        max_mtu: mtu,
        active_mtu: mtu,
        gid_tbl_len: 1,
        port_cap_flags: IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS,
        max_msg_sz: 1 << 31,
        pkey_tbl_len: 1,
        max_vl_num: 1,
        active_width,
        active_speed,
        phys_state: 5, // LinkUp
        link_layer: IBV_LINK_LAYER_ETHERNET,
        ..ibv_port_attr::default()
    };
    // SAFETY: the caller's buffer for the compat port attributes (up to `flags`).
    unsafe { attr.write(a) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_query_gid(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    if ctx.is_null() || gid.is_null() || port != 1 || index != 0 {
        errno::set(errno::EINVAL);
        return -1;
    }
    // SAFETY: an open context; the caller's GID buffer.
    unsafe { gid.write(Context::from_c(ctx).entry.gid()) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_query_gid_type(
    ctx: *mut ibv_context,
    port: u8,
    index: u32,
    gid_type: *mut u32,
) -> c_int {
    if ctx.is_null() || gid_type.is_null() || port != 1 || index != 0 {
        errno::set(errno::EINVAL);
        return -1;
    }
    // SAFETY: the caller's buffer.
    unsafe { gid_type.write(IBV_GID_TYPE_SYSFS_ROCE_V2) };
    0
}

fn gid_entry(ctx: &Context) -> ibv_gid_entry {
    ibv_gid_entry {
        gid: ctx.entry.gid(),
        gid_index: 0,
        port_num: 1,
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: 0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn irn__ibv_query_gid_ex(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    if ctx.is_null() || entry.is_null() || flags != 0 || entry_size < size_of::<ibv_gid_entry>() {
        return errno::EINVAL;
    }
    if port != 1 || index != 0 {
        return libc::ENODATA;
    }
    // SAFETY: an open context; the caller's entry of `entry_size` bytes.
    unsafe { entry.write(gid_entry(Context::from_c(ctx))) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn irn__ibv_query_gid_table(
    ctx: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    if ctx.is_null() || flags != 0 || entry_size < size_of::<ibv_gid_entry>() {
        return -(errno::EINVAL as isize);
    }
    if max == 0 || entries.is_null() {
        return -(errno::EINVAL as isize);
    }
    // SAFETY: an open context; room for at least one entry.
    unsafe { entries.write(gid_entry(Context::from_c(ctx))) };
    1
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_query_pkey(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    if ctx.is_null() || pkey.is_null() || port != 1 || index != 0 {
        return -1;
    }
    // SAFETY: the caller's buffer; the default P_Key, network order.
    unsafe { pkey.write(0xffffu16.to_be()) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_get_pkey_index(
    ctx: *mut ibv_context,
    port: u8,
    pkey: u16,
) -> c_int {
    if ctx.is_null() || port != 1 || u16::from_be(pkey) & 0x7fff != 0x7fff {
        return -1;
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_get_async_event(
    ctx: *mut ibv_context,
    _event: *mut ibv_async_event,
) -> c_int {
    if ctx.is_null() {
        return -1;
    }
    // SAFETY: an open context.
    let fd = unsafe { Context::from_c(ctx) }.c.async_fd;
    let mut b = [0u8; 1];
    // No event is ever written: this returns when the context closes (or the descriptor is
    // non-blocking), with no event.
    // SAFETY: reading into a local byte.
    let _ = unsafe { libc::read(fd, b.as_mut_ptr() as *mut c_void, 1) };
    errno::set(libc::EAGAIN);
    -1
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_ack_async_event(_event: *mut ibv_async_event) {}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_fork_init() -> c_int {
    0
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_is_fork_initialized() -> c_int {
    IBV_FORK_UNNEEDED
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// There is no sysfs tree behind irn's devices.
#[no_mangle]
pub unsafe extern "C" fn irn_ibv_read_sysfs_file(
    _dir: *const c_char,
    _file: *const c_char,
    _buf: *mut c_char,
    _size: usize,
) -> c_int {
    errno::set(libc::ENOENT);
    -1
}

#[no_mangle]
pub unsafe extern "C" fn irn_ibv_get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}
