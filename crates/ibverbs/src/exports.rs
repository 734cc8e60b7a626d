//! Which functions the library exports, under which symbol version.
//!
//! A program linked against rdma-core asks the loader for `ibv_open_device@IBVERBS_1.1`, not
//! for `ibv_open_device`: each function here is bound to the version rdma-core's
//! `libibverbs.map` (librdmacm's `librdmacm.map`, the providers' `libmlx5.map` and
//! `libefa.map`) gives it, with `.symver` directives on the Rust function `irn_NAME` that
//! implements it. `versions.map` declares the version nodes. A test compares every binding
//! with the system's own libibverbs.

/// Binds each `NAME` to `irn_NAME` at version `VERSION` (the default version, `@@`), and lists
/// the bindings in [`EXPORTS`].
macro_rules! exports {
    ($($name:ident @ $version:literal),* $(,)?) => {
        // Not in the test harness, which links an executable (it has no version nodes).
        #[cfg(not(test))]
        std::arch::global_asm!($(concat!(
            ".symver irn_", stringify!($name), ", ", stringify!($name), "@@", $version
        )),*);

        /// Every exported function and its symbol version.
        pub const EXPORTS: &[(&str, &str)] = &[$((stringify!($name), $version)),*];
    };
}

exports! {
    // Devices and contexts.
    ibv_get_device_list @ "IBVERBS_1.1",
    ibv_free_device_list @ "IBVERBS_1.1",
    ibv_get_device_name @ "IBVERBS_1.1",
    ibv_get_device_guid @ "IBVERBS_1.1",
    ibv_get_device_index @ "IBVERBS_1.9",
    ibv_open_device @ "IBVERBS_1.1",
    ibv_close_device @ "IBVERBS_1.1",
    ibv_query_device @ "IBVERBS_1.1",
    ibv_query_port @ "IBVERBS_1.1",
    ibv_query_gid @ "IBVERBS_1.1",
    ibv_query_gid_type @ "IBVERBS_PRIVATE_34",
    _ibv_query_gid_ex @ "IBVERBS_1.11",
    _ibv_query_gid_table @ "IBVERBS_1.11",
    ibv_query_pkey @ "IBVERBS_1.1",
    ibv_get_pkey_index @ "IBVERBS_1.5",
    ibv_get_async_event @ "IBVERBS_1.1",
    ibv_ack_async_event @ "IBVERBS_1.1",
    ibv_fork_init @ "IBVERBS_1.1",
    ibv_is_fork_initialized @ "IBVERBS_1.13",
    ibv_dontfork_range @ "IBVERBS_1.1",
    ibv_dofork_range @ "IBVERBS_1.1",
    ibv_read_sysfs_file @ "IBVERBS_1.0",
    ibv_get_sysfs_path @ "IBVERBS_1.0",
    // Protection domains and memory.
    ibv_alloc_pd @ "IBVERBS_1.1",
    ibv_dealloc_pd @ "IBVERBS_1.1",
    ibv_reg_mr @ "IBVERBS_1.1",
    ibv_reg_mr_iova @ "IBVERBS_1.7",
    ibv_reg_mr_iova2 @ "IBVERBS_1.8",
    ibv_reg_dmabuf_mr @ "IBVERBS_1.12",
    ibv_rereg_mr @ "IBVERBS_1.1",
    ibv_dereg_mr @ "IBVERBS_1.1",
    // Completion queues and channels.
    ibv_create_comp_channel @ "IBVERBS_1.0",
    ibv_destroy_comp_channel @ "IBVERBS_1.0",
    ibv_create_cq @ "IBVERBS_1.1",
    ibv_resize_cq @ "IBVERBS_1.1",
    ibv_destroy_cq @ "IBVERBS_1.1",
    ibv_get_cq_event @ "IBVERBS_1.1",
    ibv_ack_cq_events @ "IBVERBS_1.1",
    // Queue pairs.
    ibv_create_qp @ "IBVERBS_1.1",
    ibv_modify_qp @ "IBVERBS_1.1",
    ibv_query_qp @ "IBVERBS_1.1",
    ibv_destroy_qp @ "IBVERBS_1.1",
    ibv_qp_to_qp_ex @ "IBVERBS_1.6",
    ibv_query_ece @ "IBVERBS_1.10",
    ibv_set_ece @ "IBVERBS_1.10",
    ibv_create_srq @ "IBVERBS_1.1",
    ibv_modify_srq @ "IBVERBS_1.1",
    ibv_query_srq @ "IBVERBS_1.1",
    ibv_destroy_srq @ "IBVERBS_1.1",
    ibv_attach_mcast @ "IBVERBS_1.1",
    ibv_detach_mcast @ "IBVERBS_1.1",
    // Address handles.
    ibv_create_ah @ "IBVERBS_1.1",
    ibv_destroy_ah @ "IBVERBS_1.1",
    ibv_init_ah_from_wc @ "IBVERBS_1.1",
    ibv_create_ah_from_wc @ "IBVERBS_1.1",
    ibv_resolve_eth_l2_from_gid @ "IBVERBS_1.1",
    // Names and rates.
    ibv_wc_status_str @ "IBVERBS_1.1",
    ibv_node_type_str @ "IBVERBS_1.1",
    ibv_port_state_str @ "IBVERBS_1.1",
    ibv_event_type_str @ "IBVERBS_1.1",
    ibv_rate_to_mult @ "IBVERBS_1.0",
    mult_to_ibv_rate @ "IBVERBS_1.0",
    ibv_rate_to_mbps @ "IBVERBS_1.1",
    mbps_to_ibv_rate @ "IBVERBS_1.1",
    // librdmacm.
    rdma_accept @ "RDMACM_1.0",
    rdma_ack_cm_event @ "RDMACM_1.0",
    rdma_bind_addr @ "RDMACM_1.0",
    rdma_connect @ "RDMACM_1.0",
    rdma_create_event_channel @ "RDMACM_1.0",
    rdma_create_id @ "RDMACM_1.0",
    rdma_create_qp @ "RDMACM_1.0",
    rdma_create_qp_ex @ "RDMACM_1.0",
    rdma_destroy_event_channel @ "RDMACM_1.0",
    rdma_destroy_id @ "RDMACM_1.0",
    rdma_destroy_qp @ "RDMACM_1.0",
    rdma_disconnect @ "RDMACM_1.0",
    rdma_event_str @ "RDMACM_1.0",
    rdma_freeaddrinfo @ "RDMACM_1.0",
    rdma_get_cm_event @ "RDMACM_1.0",
    rdma_getaddrinfo @ "RDMACM_1.0",
    rdma_listen @ "RDMACM_1.0",
    rdma_reject @ "RDMACM_1.0",
    rdma_resolve_addr @ "RDMACM_1.0",
    rdma_resolve_route @ "RDMACM_1.0",
    rdma_set_option @ "RDMACM_1.0",
    rpoll @ "RDMACM_1.0",
    rdma_get_src_port @ "RDMACM_1.0",
    rdma_get_dst_port @ "RDMACM_1.0",
    rdma_create_ep @ "RDMACM_1.0",
    rdma_destroy_ep @ "RDMACM_1.0",
    rdma_get_request @ "RDMACM_1.0",
    rdma_get_devices @ "RDMACM_1.0",
    rdma_free_devices @ "RDMACM_1.0",
    rdma_migrate_id @ "RDMACM_1.0",
    rdma_notify @ "RDMACM_1.0",
    rdma_join_multicast @ "RDMACM_1.0",
    rdma_leave_multicast @ "RDMACM_1.0",
    rdma_create_srq @ "RDMACM_1.0",
    rdma_destroy_srq @ "RDMACM_1.0",
    rdma_establish @ "RDMACM_1.2",
    rdma_init_qp_attr @ "RDMACM_1.2",
    // The provider libraries perftest links (libmlx5.so.1, libefa.so.1): their direct verbs
    // are refused, for a device that is neither.
    mlx5dv_open_device @ "MLX5_1.7",
    mlx5dv_create_qp @ "MLX5_1.3",
    mlx5dv_qp_ex_from_ibv_qp_ex @ "MLX5_1.10",
    mlx5dv_create_mkey @ "MLX5_1.10",
    mlx5dv_destroy_mkey @ "MLX5_1.10",
    mlx5dv_devx_general_cmd @ "MLX5_1.7",
    mlx5dv_crypto_login @ "MLX5_1.21",
    mlx5dv_dek_create @ "MLX5_1.21",
    mlx5dv_dek_destroy @ "MLX5_1.21",
    efadv_query_device @ "EFA_1.1",
    efadv_create_qp_ex @ "EFA_1.1",
}

#[cfg(test)]
mod tests {
    use super::EXPORTS;

    /// Each libibverbs function exported here carries the version the system's libibverbs
    /// (rdma-core, Debian's libibverbs1) gives it: a program linked there binds here.
    #[test]
    fn versions_are_rdma_cores() {
        let lib = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";
        let out = std::process::Command::new("objdump")
            .args(["-T", lib])
            .output()
            .expect("objdump runs (binutils)");
        assert!(
            out.status.success(),
            "objdump -T {lib}: is libibverbs1 installed?"
        );
        let table = String::from_utf8_lossy(&out.stdout);
        let mut checked = 0;
        for (name, version) in EXPORTS.iter().filter(|(_, v)| v.starts_with("IBVERBS")) {
            let theirs: Vec<&str> = table
                .lines()
                .filter(|l| l.split_whitespace().last() == Some(name))
                .filter_map(|l| l.split_whitespace().rev().nth(1))
                .filter(|v| !v.starts_with('('))
                .collect();
            assert_eq!(theirs, [*version], "{name}: rdma-core's default version");
            checked += 1;
        }
        assert!(checked > 50);
    }
}
