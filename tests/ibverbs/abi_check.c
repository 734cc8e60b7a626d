/* What an RDMA program sees of irn's libibverbs, checked from C through rdma-core's own
 * header: two devices of one process (irn0, irn1) joined by an RC queue pair each, then
 * every operation's data, completion and error as verbs(7) promises them. Built by
 * tests/ibverbs_shim.rs against the system's <infiniband/verbs.h> and libibverbs, run with
 * irn's in its place (`irn exec`). Prints "abi-check: ok" and exits 0, or names the first
 * broken promise and exits 1. */

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "abi-check: line %d: ", __LINE__);     \
			fprintf(stderr, __VA_ARGS__);                           \
			fprintf(stderr, "\n");                                  \
			exit(1);                                                \
		}                                                               \
	} while (0)

enum { REGION = 256, GUARD = 0xee };

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *channel;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	union ibv_gid gid;
	uint8_t *buf;
	struct ibv_mr *mr;
};

static void open_end(struct ibv_device *dev, struct end *e, int with_channel)
{
	e->ctx = ibv_open_device(dev);
	CHECK(e->ctx, "ibv_open_device: %s", strerror(errno));
	e->pd = ibv_alloc_pd(e->ctx);
	CHECK(e->pd, "ibv_alloc_pd");
	e->channel = with_channel ? ibv_create_comp_channel(e->ctx) : NULL;
	CHECK(!with_channel || e->channel, "ibv_create_comp_channel");
	e->cq = ibv_create_cq(e->ctx, 64, e, e->channel, 0);
	CHECK(e->cq, "ibv_create_cq");
	struct ibv_qp_init_attr ia = {
		.send_cq = e->cq,
		.recv_cq = e->cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 64 },
		.qp_type = IBV_QPT_RC,
	};
	e->qp = ibv_create_qp(e->pd, &ia);
	CHECK(e->qp, "ibv_create_qp: %s", strerror(errno));
	CHECK(e->qp->state == IBV_QPS_RESET, "a new QP is in RESET");
	CHECK(ibv_query_gid(e->ctx, 1, 0, &e->gid) == 0, "ibv_query_gid 0");
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
	};
	CHECK(ibv_modify_qp(e->qp, &a,
			    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				    IBV_QP_ACCESS_FLAGS) == 0,
	      "to INIT");
	e->buf = aligned_alloc(64, REGION);
	memset(e->buf, GUARD, REGION);
	e->mr = ibv_reg_mr(e->pd, e->buf, REGION,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(e->mr, "ibv_reg_mr: %s", strerror(errno));
	CHECK(e->mr->addr == e->buf && e->mr->length == REGION,
	      "a region is named by the program's address");
}

static void connect_end(struct end *e, struct end *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = peer->qp->qp_num,
		.rq_psn = 7,
		.max_dest_rd_atomic = 4,
		.min_rnr_timer = 12,
		.ah_attr = { .is_global = 1,
			     .grh = { .dgid = peer->gid, .hop_limit = 1 },
			     .port_num = 1 },
	};
	CHECK(ibv_modify_qp(e->qp, &a,
			    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				    IBV_QP_MIN_RNR_TIMER) == 0,
	      "to RTR");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 7;
	a.max_rd_atomic = 4;
	CHECK(ibv_modify_qp(e->qp, &a,
			    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				    IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "to RTS");
	CHECK(e->qp->state == IBV_QPS_RTS, "qp->state follows");
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(e->qp, &q, IBV_QP_STATE, &qi) == 0, "ibv_query_qp");
	CHECK(q.qp_state == IBV_QPS_RTS && q.dest_qp_num == peer->qp->qp_num &&
		      q.path_mtu == IBV_MTU_1024 && qi.send_cq == e->cq,
	      "ibv_query_qp gives back what was set");
}

/* One completion, waiting up to 5 s. */
static struct ibv_wc one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	for (int i = 0; i < 500000; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "ibv_poll_cq failed");
		if (n == 1)
			return wc;
		usleep(10);
	}
	CHECK(0, "no completion in 5 s");
	return wc;
}

/* No completion beyond those expected. */
static void no_more(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	usleep(20000);
	CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "an extra completion (wr_id %llu)",
	      (unsigned long long)wc.wr_id);
}

static int post(struct end *e, enum ibv_wr_opcode op, uint64_t wr_id, void *local,
		uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey, int flags)
{
	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				  .opcode = op, .send_flags = flags };
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	struct ibv_send_wr *bad = NULL;
	return ibv_post_send(e->qp, &wr, &bad);
}

static int guarded(const uint8_t *buf, size_t from, size_t to)
{
	for (size_t i = 0; i < REGION; i++)
		if ((i < from || i >= to) && buf[i] != GUARD)
			return 0;
	return 1;
}

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n == 2, "two devices (IRN_IBV_DEVICES), got %d", n);
	CHECK(strcmp(ibv_get_device_name(list[0]), "irn0") == 0 &&
		      strcmp(ibv_get_device_name(list[1]), "irn1") == 0,
	      "devices irn0 and irn1");
	struct end a = { 0 }, b = { 0 };
	open_end(list[0], &a, 0);
	open_end(list[1], &b, 1);
	ibv_free_device_list(list);

	/* Refusals, with the error numbers a provider gives. */
	struct ibv_port_attr port;
	CHECK(ibv_query_port(a.ctx, 1, &port) == 0 && port.link_layer == IBV_LINK_LAYER_ETHERNET &&
		      port.state == IBV_PORT_ACTIVE && port.gid_tbl_len == 1,
	      "an active Ethernet port with one GID");
	union ibv_gid g;
	CHECK(ibv_query_gid(a.ctx, 1, 1, &g) != 0, "no second GID");
	errno = 0;
	CHECK(!ibv_reg_mr(a.pd, a.buf, 64, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL,
	      "remote write without local write is refused (EINVAL), errno %d", errno);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	errno = 0;
	CHECK(!ibv_create_srq(a.pd, &sa) && errno == EOPNOTSUPP, "no SRQs (EOPNOTSUPP)");

	connect_end(&a, &b);
	connect_end(&b, &a);

	/* A work request with more entries than the QP allows is refused at once, named. */
	struct ibv_sge three[3] = { { (uintptr_t)a.buf, 1, a.mr->lkey },
				    { (uintptr_t)a.buf, 1, a.mr->lkey },
				    { (uintptr_t)a.buf, 1, a.mr->lkey } };
	struct ibv_send_wr w3 = { .wr_id = 99, .sg_list = three, .num_sge = 3,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad = NULL;
	CHECK(ibv_post_send(a.qp, &w3, &bad) != 0 && bad == &w3, "bad_wr names the refused WR");

	/* Write: the bytes land where the RETH says, nowhere else; one completion. */
	for (int i = 0; i < 64; i++)
		a.buf[i] = (uint8_t)(i * 7 + 1);
	CHECK(post(&a, IBV_WR_RDMA_WRITE, 1, a.buf, 64, a.mr->lkey, (uintptr_t)b.buf + 16,
		   b.mr->rkey, IBV_SEND_SIGNALED) == 0,
	      "post Write");
	struct ibv_wc wc = one(a.cq);
	CHECK(wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE,
	      "Write completes (status %d: %s)", wc.status, ibv_wc_status_str(wc.status));
	CHECK(memcmp(b.buf + 16, a.buf, 64) == 0 && guarded(b.buf, 16, 80),
	      "Write's bytes at offset 16 and nowhere else");
	no_more(a.cq);

	/* Unsignaled requests complete silently; the signaled one after them once. */
	for (int i = 0; i < 3; i++)
		CHECK(post(&a, IBV_WR_RDMA_WRITE, 10 + i, a.buf, 8, a.mr->lkey,
			   (uintptr_t)b.buf + 100, b.mr->rkey, 0) == 0,
		      "post unsignaled");
	CHECK(post(&a, IBV_WR_RDMA_WRITE, 13, a.buf, 8, a.mr->lkey, (uintptr_t)b.buf + 100,
		   b.mr->rkey, IBV_SEND_SIGNALED) == 0,
	      "post signaled");
	wc = one(a.cq);
	CHECK(wc.wr_id == 13 && wc.status == IBV_WC_SUCCESS, "only the signaled completes");
	no_more(a.cq);

	/* Read back what b holds. */
	memset(a.buf + 128, 0, 64);
	CHECK(post(&a, IBV_WR_RDMA_READ, 2, a.buf + 128, 64, a.mr->lkey, (uintptr_t)b.buf + 16,
		   b.mr->rkey, IBV_SEND_SIGNALED) == 0,
	      "post Read");
	wc = one(a.cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ && wc.byte_len == 64,
	      "Read completes with its length");
	CHECK(memcmp(a.buf + 128, a.buf, 64) == 0, "Read brings b's bytes");

	/* Atomics on 8 aligned bytes of b: fetch-and-add, then compare-and-swap. */
	uint64_t *target = (uint64_t *)(b.buf + 192), *old = (uint64_t *)(a.buf + 200);
	*target = 5;
	struct ibv_sge asge = { (uintptr_t)old, 8, a.mr->lkey };
	struct ibv_send_wr aw = { .wr_id = 3, .sg_list = &asge, .num_sge = 1,
				  .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				  .send_flags = IBV_SEND_SIGNALED };
	aw.wr.atomic.remote_addr = (uintptr_t)target;
	aw.wr.atomic.rkey = b.mr->rkey;
	aw.wr.atomic.compare_add = 3;
	CHECK(ibv_post_send(a.qp, &aw, &bad) == 0, "post fetch-and-add");
	wc = one(a.cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD && *old == 5 &&
		      *target == 8,
	      "fetch-and-add: old %llu, now %llu", (unsigned long long)*old,
	      (unsigned long long)*target);
	aw.wr_id = 4;
	aw.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	aw.wr.atomic.compare_add = 8;
	aw.wr.atomic.swap = 42;
	CHECK(ibv_post_send(a.qp, &aw, &bad) == 0, "post compare-and-swap");
	wc = one(a.cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_COMP_SWAP && *old == 8 &&
		      *target == 42,
	      "compare-and-swap");

	/* Send with immediate, inline from the stack (reused at once), to a receive announced
	 * through b's completion channel. */
	struct ibv_sge rsge = { (uintptr_t)b.buf, 64, b.mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 5, .sg_list = &rsge, .num_sge = 1 };
	struct ibv_recv_wr *rbad = NULL;
	CHECK(ibv_post_recv(b.qp, &rw, &rbad) == 0, "post recv");
	CHECK(ibv_req_notify_cq(b.cq, 0) == 0, "arm b's CQ");
	char msg[32];
	snprintf(msg, sizeof msg, "inline and immediate");
	struct ibv_sge ssge = { (uintptr_t)msg, (uint32_t)strlen(msg) + 1, 0 };
	struct ibv_send_wr sw = { .wr_id = 6, .sg_list = &ssge, .num_sge = 1,
				  .opcode = IBV_WR_SEND_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
				  .imm_data = htonl(0x12345678) };
	CHECK(ibv_post_send(a.qp, &sw, &bad) == 0, "post inline Send");
	memset(msg, 0, sizeof msg);
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	CHECK(ibv_get_cq_event(b.channel, &ev_cq, &ev_ctx) == 0 && ev_cq == b.cq && ev_ctx == &b,
	      "the channel names b's CQ and its context");
	ibv_ack_cq_events(b.cq, 1);
	wc = one(b.cq);
	CHECK(wc.wr_id == 5 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
		      (wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 0x12345678 &&
		      wc.byte_len == 21 && wc.qp_num == b.qp->qp_num,
	      "receive: flags %#x imm %#x len %u", wc.wc_flags, ntohl(wc.imm_data), wc.byte_len);
	CHECK(strcmp((char *)b.buf, "inline and immediate") == 0,
	      "inline data was taken when posted, got '%s'", (char *)b.buf);
	wc = one(a.cq);
	CHECK(wc.wr_id == 6 && wc.opcode == IBV_WC_SEND && wc.status == IBV_WC_SUCCESS,
	      "the Send completes once");
	no_more(a.cq);
	no_more(b.cq);

	/* A Write past the end of b's region: refused by b, nothing written, the requester told
	 * IBV_WC_REM_ACCESS_ERR. */
	uint8_t before[REGION];
	memcpy(before, b.buf, REGION);
	CHECK(post(&a, IBV_WR_RDMA_WRITE, 7, a.buf, 64, a.mr->lkey,
		   (uintptr_t)b.buf + REGION - 16, b.mr->rkey, IBV_SEND_SIGNALED) == 0,
	      "post Write past the end");
	wc = one(a.cq);
	CHECK(wc.wr_id == 7 && wc.status == IBV_WC_REM_ACCESS_ERR,
	      "remote access error, got %s", ibv_wc_status_str(wc.status));
	CHECK(memcmp(before, b.buf, REGION) == 0, "nothing written outside the region");

	/* Objects in use are not destroyed: the kernel's answer, EBUSY. */
	CHECK(ibv_destroy_cq(a.cq) == EBUSY, "a CQ a QP uses stays (EBUSY)");
	CHECK(ibv_dealloc_pd(a.pd) == EBUSY, "a PD with a region and a QP stays (EBUSY)");
	CHECK(ibv_destroy_comp_channel(b.channel) == EBUSY, "a channel a CQ uses stays (EBUSY)");

	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0, "destroy QPs");
	CHECK(ibv_dereg_mr(a.mr) == 0 && ibv_dereg_mr(b.mr) == 0, "deregister");
	CHECK(ibv_destroy_cq(a.cq) == 0 && ibv_destroy_cq(b.cq) == 0, "destroy CQs");
	CHECK(ibv_destroy_comp_channel(b.channel) == 0, "destroy channel");
	CHECK(ibv_dealloc_pd(a.pd) == 0 && ibv_dealloc_pd(b.pd) == 0, "free PDs");
	CHECK(ibv_close_device(a.ctx) == 0 && ibv_close_device(b.ctx) == 0, "close");
	printf("abi-check: ok\n");
	return 0;
}
