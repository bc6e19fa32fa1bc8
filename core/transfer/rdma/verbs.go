//go:build rdma

package rdma

// Thin cgo layer over libibverbs. Every verbs entry point that is an inline
// function or macro in <infiniband/verbs.h> (ibv_post_send, ibv_poll_cq,
// ibv_query_port, ibv_reg_mr) or that fills a union-heavy struct is called
// through a small C trampoline below, so Go never builds verbs structs or
// calls function pointers itself (STYLE practice 14). Addresses of memory
// to register cross as uint64, so no Go pointer is retained by C.

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct mc_port {
	int state;
	int active_mtu;
	int lid;
	int link_layer;
	int gid_tbl_len;
};

struct mc_dev_caps {
	int max_qp_wr;
	int max_sge;
	int max_cqe;
	int max_qp_rd_atom;
	int max_qp_init_rd_atom;
};

struct mc_wc {
	uint64_t wr_id;
	int status;
	int opcode;
	uint32_t byte_len;
	uint32_t vendor_err;
};

static const char *mc_device_name(struct ibv_device **list, int i) {
	return ibv_get_device_name(list[i]);
}

static struct ibv_context *mc_open_device(struct ibv_device **list, int i) {
	return ibv_open_device(list[i]);
}

static int mc_query_port(struct ibv_context *ctx, int port, struct mc_port *out) {
	struct ibv_port_attr a;
	memset(&a, 0, sizeof a);
	int rc = ibv_query_port(ctx, (uint8_t)port, &a);
	if (rc) return rc;
	out->state = a.state;
	out->active_mtu = a.active_mtu;
	out->lid = a.lid;
	out->link_layer = a.link_layer;
	out->gid_tbl_len = a.gid_tbl_len;
	return 0;
}

static int mc_query_device(struct ibv_context *ctx, struct mc_dev_caps *out) {
	struct ibv_device_attr a;
	memset(&a, 0, sizeof a);
	int rc = ibv_query_device(ctx, &a);
	if (rc) return rc;
	out->max_qp_wr = a.max_qp_wr;
	out->max_sge = a.max_sge;
	out->max_cqe = a.max_cqe;
	out->max_qp_rd_atom = a.max_qp_rd_atom;
	out->max_qp_init_rd_atom = a.max_qp_init_rd_atom;
	return 0;
}

static int mc_query_gid(struct ibv_context *ctx, int port, int index, uint8_t *out) {
	union ibv_gid g;
	int rc = ibv_query_gid(ctx, (uint8_t)port, index, &g);
	if (rc) return rc;
	memcpy(out, g.raw, 16);
	return 0;
}

// mc_pick_gid: 0 on InfiniBand; on RoCE the first RoCE v2 GID holding an
// IPv4-mapped address (::ffff:a.b.c.d), else the first RoCE v2 GID, else 0.
static int mc_pick_gid(struct ibv_context *ctx, int port, int tbl_len, int is_eth) {
	if (!is_eth) return 0;
	int first_v2 = -1;
	for (int i = 0; i < tbl_len; i++) {
		struct ibv_gid_entry e;
		if (ibv_query_gid_ex(ctx, (uint32_t)port, (uint32_t)i, &e, 0)) continue;
		if (e.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
		static const uint8_t v4prefix[12] = {0,0,0,0,0,0,0,0,0,0,0xff,0xff};
		if (memcmp(e.gid.raw, v4prefix, 12) == 0) return i;
		if (first_v2 < 0) first_v2 = i;
	}
	return first_v2 >= 0 ? first_v2 : 0;
}

// mc_access maps the Go side's access bits (bit 0 local write, bit 1
// remote read, bit 2 remote write) to ibv_access_flags.
static int mc_access(int acc) {
	int access = 0;
	if (acc & 1) access |= IBV_ACCESS_LOCAL_WRITE;
	if (acc & 2) access |= IBV_ACCESS_REMOTE_READ;
	if (acc & 4) access |= IBV_ACCESS_REMOTE_WRITE;
	return access;
}

static struct ibv_mr *mc_reg_mr(struct ibv_pd *pd, uint64_t addr, uint64_t len, int acc) {
	return ibv_reg_mr(pd, (void *)(uintptr_t)addr, (size_t)len, mc_access(acc));
}

static uint32_t mc_mr_lkey(struct ibv_mr *mr) { return mr->lkey; }
static uint32_t mc_mr_rkey(struct ibv_mr *mr) { return mr->rkey; }
static uint32_t mc_qp_num(struct ibv_qp *qp) { return qp->qp_num; }

static struct ibv_qp *mc_create_qp(struct ibv_pd *pd, struct ibv_cq *cq, int max_wr, int max_sge, int max_inline) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 0;
	a.cap.max_send_wr = max_wr;
	a.cap.max_recv_wr = 1;
	a.cap.max_send_sge = max_sge;
	a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = max_inline;
	return ibv_create_qp(pd, &a);
}

static int mc_qp_init(struct ibv_qp *qp, int port, int pkey_index) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = (uint8_t)port;
	a.pkey_index = (uint16_t)pkey_index;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int mc_qp_rtr(struct ibv_qp *qp, int port, int mtu, uint32_t dest_qpn, uint32_t rq_psn,
                     int dlid, const uint8_t *dgid, int use_grh, int sgid_index, int sl, int tc, int max_dest_rd_atomic) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = (enum ibv_mtu)mtu;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = rq_psn;
	a.max_dest_rd_atomic = (uint8_t)max_dest_rd_atomic;
	a.min_rnr_timer = 12;
	a.ah_attr.dlid = (uint16_t)dlid;
	a.ah_attr.sl = (uint8_t)sl;
	a.ah_attr.port_num = (uint8_t)port;
	if (use_grh) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)sgid_index;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.grh.traffic_class = (uint8_t)tc;
	}
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
	                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int mc_qp_rts(struct ibv_qp *qp, uint32_t sq_psn, int max_rd_atomic) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = sq_psn;
	a.max_rd_atomic = (uint8_t)max_rd_atomic;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
	                             IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int mc_post_rw(struct ibv_qp *qp, int write, uint64_t laddr, uint32_t len, uint32_t lkey,
                      uint64_t raddr, uint32_t rkey, uint64_t wr_id, int max_inline) {
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	sge.addr = laddr;
	sge.length = len;
	sge.lkey = lkey;
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (write && (int)len <= max_inline) wr.send_flags |= IBV_SEND_INLINE;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

static int mc_poll(struct ibv_cq *cq, struct mc_wc *out, int n) {
	struct ibv_wc wc[16];
	if (n > 16) n = 16;
	int got = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].byte_len = wc[i].byte_len;
		out[i].vendor_err = wc[i].vendor_err;
	}
	return got;
}

static const char *mc_wc_status_str(int s) { return ibv_wc_status_str((enum ibv_wc_status)s); }
*/
import "C"

import (
	"fmt"
	"syscall"
)

// builtWithVerbs tells tests which twin they run against.
const builtWithVerbs = true

// deviceList returns the verbs device names. Errors: ErrNoDevice (wrapped
// with errno) when libibverbs cannot list devices or lists none.
func deviceList() ([]string, error) {
	var n C.int
	list, errno := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, fmt.Errorf("%w: ibv_get_device_list: %v", ErrNoDevice, errnoOr(errno, "failed"))
	}
	defer C.ibv_free_device_list(list)
	names := make([]string, 0, int(n))
	for i := 0; i < int(n); i++ {
		names = append(names, C.GoString(C.mc_device_name(list, C.int(i))))
	}
	if len(names) == 0 {
		return nil, ErrNoDevice
	}
	return names, nil
}

// errnoOr returns err, or a plain error with text when cgo saw errno 0.
func errnoOr(err error, text string) error {
	if err == nil || err == syscall.Errno(0) {
		return fmt.Errorf("%s", text)
	}
	return err
}

// rcErr turns a verbs return code (0, or an errno value) into an error.
func rcErr(op string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	if rc < 0 {
		rc = -rc
	}
	return fmt.Errorf("rdma: %s: %w", op, syscall.Errno(rc))
}

func boolInt(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// device is an opened verbs device with its protection domain.
type device struct {
	name string
	ctx  *C.struct_ibv_context
	pd   *C.struct_ibv_pd
	// Port and capability facts, fixed after open.
	port      int
	lid       uint16
	eth       bool // RoCE (Ethernet link layer): addresses need a GRH
	mtu       int  // enum ibv_mtu actually used
	gidIndex  int
	gid       [16]byte
	rdAtom    int // max outstanding RDMA READs as initiator (max_rd_atomic)
	destAtom  int // ... as responder (max_dest_rd_atomic)
	maxWR     int // cfg.MaxWR capped by the device
	maxSGE    int
	maxCQE    int
	maxInline int
	pkeyIndex int
	sl, tc    int
}

// openDevice opens the named device, checks that cfg.Port is active, picks
// the GID and allocates a PD. Errors: ErrNoDevice (wrapped) for an absent
// device or inactive port; verbs errnos otherwise.
func openDevice(name string, cfg *Config) (*device, error) {
	var n C.int
	list, errno := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, fmt.Errorf("%w: ibv_get_device_list: %v", ErrNoDevice, errnoOr(errno, "failed"))
	}
	defer C.ibv_free_device_list(list)
	d := &device{name: name, port: cfg.Port, maxInline: cfg.MaxInline, pkeyIndex: cfg.PKeyIndex, sl: cfg.ServiceLevel, tc: cfg.TrafficClass}
	for i := 0; i < int(n); i++ {
		if C.GoString(C.mc_device_name(list, C.int(i))) == name {
			ctx, errno := C.mc_open_device(list, C.int(i))
			if ctx == nil {
				return nil, fmt.Errorf("rdma: ibv_open_device %s: %v", name, errnoOr(errno, "failed"))
			}
			d.ctx = ctx
			break
		}
	}
	if d.ctx == nil {
		return nil, fmt.Errorf("%w: device %q not found", ErrNoDevice, name)
	}
	if err := d.setup(cfg); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *device) setup(cfg *Config) error {
	var p C.struct_mc_port
	if err := rcErr("ibv_query_port "+d.name, C.mc_query_port(d.ctx, C.int(d.port), &p)); err != nil {
		return err
	}
	if p.state != C.IBV_PORT_ACTIVE {
		return fmt.Errorf("%w: %s port %d is not active (state %d)", ErrNoDevice, d.name, d.port, int(p.state))
	}
	var caps C.struct_mc_dev_caps
	if err := rcErr("ibv_query_device "+d.name, C.mc_query_device(d.ctx, &caps)); err != nil {
		return err
	}
	d.lid = uint16(p.lid)
	d.eth = p.link_layer == C.IBV_LINK_LAYER_ETHERNET
	d.mtu = min(mtuEnum(cfg.MTU), int(p.active_mtu))
	d.maxWR = min(cfg.MaxWR, int(caps.max_qp_wr))
	d.maxSGE = min(cfg.MaxSGE, int(caps.max_sge))
	d.maxCQE = min(cfg.MaxCQE, int(caps.max_cqe))
	d.rdAtom = max(1, min(16, int(caps.max_qp_init_rd_atom)))
	d.destAtom = max(1, min(16, int(caps.max_qp_rd_atom)))
	d.gidIndex = cfg.GIDIndex
	if d.gidIndex == GIDAuto {
		d.gidIndex = int(C.mc_pick_gid(d.ctx, C.int(d.port), p.gid_tbl_len, boolInt(d.eth)))
	}
	if d.gidIndex >= int(p.gid_tbl_len) && p.gid_tbl_len > 0 {
		return fmt.Errorf("%w: rdma: GID index %d beyond the table (%d entries)", ErrNoDevice, d.gidIndex, int(p.gid_tbl_len))
	}
	var gid [16]C.uint8_t
	if err := rcErr("ibv_query_gid", C.mc_query_gid(d.ctx, C.int(d.port), C.int(d.gidIndex), &gid[0])); err != nil {
		return err
	}
	for i := range gid {
		d.gid[i] = byte(gid[i])
	}
	pd, errno := C.ibv_alloc_pd(d.ctx)
	if pd == nil {
		return fmt.Errorf("rdma: ibv_alloc_pd %s: %v", d.name, errnoOr(errno, "failed"))
	}
	d.pd = pd
	return nil
}

// close releases the PD and the device context (every MR, QP and CQ must
// be gone; verbs refuses otherwise and the objects leak).
func (d *device) close() {
	if d.pd != nil {
		C.ibv_dealloc_pd(d.pd)
		d.pd = nil
	}
	if d.ctx != nil {
		C.ibv_close_device(d.ctx)
		d.ctx = nil
	}
}

func (d *device) linkLayer() string {
	if d.eth {
		return "Ethernet"
	}
	return "InfiniBand"
}

// memReg is one registration of a range on one device.
type memReg struct {
	lkey, rkey uint32
	handle     any // *C.struct_ibv_mr
}

// ibvAccess is the ibv_access_flags value ibv_reg_mr gets for acc.
func ibvAccess(acc access) int { return int(C.mc_access(C.int(acc))) }

// regMR registers [addr, addr+length) (off-heap or caller-owned memory
// that stays mapped while registered) with this device's PD, allowing
// acc (beyond the local reads every registration allows).
func (d *device) regMR(addr, length uint64, acc access) (memReg, error) {
	mr, errno := C.mc_reg_mr(d.pd, C.uint64_t(addr), C.uint64_t(length), C.int(acc))
	if mr == nil {
		return memReg{}, fmt.Errorf("rdma: ibv_reg_mr %s [%#x,+%d): %w", d.name, addr, length, errnoOr(errno, "failed"))
	}
	return memReg{lkey: uint32(C.mc_mr_lkey(mr)), rkey: uint32(C.mc_mr_rkey(mr)), handle: mr}, nil
}

// deregMR releases a region's registrations, one per device (peer regions
// have none).
func deregMR(r region) {
	for _, h := range r.handles {
		if mr, ok := h.(*C.struct_ibv_mr); ok && mr != nil {
			C.ibv_dereg_mr(mr)
		}
	}
}

// cq is a completion queue with a poll buffer; one goroutine uses it at a
// time.
type cq struct {
	p   *C.struct_ibv_cq
	wcs [16]C.struct_mc_wc
}

func (d *device) createCQ(depth int) (*cq, error) {
	p, errno := C.ibv_create_cq(d.ctx, C.int(depth), nil, nil, 0)
	if p == nil {
		return nil, fmt.Errorf("rdma: ibv_create_cq(%d): %v", depth, errnoOr(errno, "failed"))
	}
	return &cq{p: p}, nil
}

func (c *cq) destroy() { C.ibv_destroy_cq(c.p) }

// poll reaps up to 16 completions and returns how many; completion(i)
// reads them. Errors: a negative ibv_poll_cq result.
func (c *cq) poll() (int, error) {
	n := int(C.mc_poll(c.p, &c.wcs[0], C.int(len(c.wcs))))
	if n < 0 {
		return 0, fmt.Errorf("rdma: ibv_poll_cq failed (%d)", n)
	}
	return n, nil
}

// completion reports whether the i-th reaped completion succeeded, and
// otherwise its status text and vendor error.
func (c *cq) completion(i int) (ok bool, status string, vendorErr uint32) {
	wc := &c.wcs[i]
	if wc.status == C.IBV_WC_SUCCESS {
		return true, "", 0
	}
	return false, C.GoString(C.mc_wc_status_str(wc.status)), uint32(wc.vendor_err)
}

// qp is an RC queue pair.
type qp struct{ p *C.struct_ibv_qp }

// createQP creates an RC QP on c and moves it to INIT.
func (d *device) createQP(c *cq) (*qp, error) {
	p, errno := C.mc_create_qp(d.pd, c.p, C.int(d.maxWR), C.int(d.maxSGE), C.int(d.maxInline))
	if p == nil {
		return nil, fmt.Errorf("rdma: ibv_create_qp: %v", errnoOr(errno, "failed"))
	}
	q := &qp{p: p}
	if err := rcErr("modify QP to INIT", C.mc_qp_init(p, C.int(d.port), C.int(d.pkeyIndex))); err != nil {
		q.destroy()
		return nil, err
	}
	return q, nil
}

func (q *qp) destroy() { C.ibv_destroy_qp(q.p) }

func (q *qp) num() uint32 { return uint32(C.mc_qp_num(q.p)) }

// info is this QP's end of the connection; the PSN is derived from the QPN.
func (d *device) info(q *qp) qpInfo {
	n := q.num()
	return qpInfo{Device: d.name, LinkLayer: d.linkLayer(), LID: d.lid, GID: encodeGID(d.gid), QPN: n, PSN: psnFor(n), MTU: d.mtu}
}

// connect moves q to RTR towards remote, then to RTS.
func (d *device) connect(q *qp, remote *qpInfo, rgid [16]byte) error {
	var dgid [16]C.uint8_t
	for i := range rgid {
		dgid[i] = C.uint8_t(rgid[i])
	}
	useGRH := d.eth || remote.LID == 0
	rc := C.mc_qp_rtr(q.p, C.int(d.port), C.int(min(d.mtu, remote.MTU)), C.uint32_t(remote.QPN), C.uint32_t(remote.PSN),
		C.int(remote.LID), &dgid[0], boolInt(useGRH), C.int(d.gidIndex), C.int(d.sl), C.int(d.tc), C.int(d.destAtom))
	if err := rcErr("modify QP to RTR", rc); err != nil {
		return err
	}
	return rcErr("modify QP to RTS", C.mc_qp_rts(q.p, C.uint32_t(psnFor(q.num())), C.int(d.rdAtom)))
}

// postRW posts one signalled RDMA READ or WRITE.
func (d *device) postRW(q *qp, write bool, laddr uint64, n uint32, lkey uint32, raddr uint64, rkey uint32, wrID uint64) error {
	return rcErr("ibv_post_send", C.mc_post_rw(q.p, boolInt(write), C.uint64_t(laddr), C.uint32_t(n), C.uint32_t(lkey),
		C.uint64_t(raddr), C.uint32_t(rkey), C.uint64_t(wrID), C.int(d.maxInline)))
}

// psnFor derives a 24-bit starting PSN from a QPN (upstream draws it at
// random; any value works as long as both sides agree, which the handshake
// ensures).
func psnFor(qpn uint32) uint32 { return (qpn * 2654435761) & 0xffffff }
