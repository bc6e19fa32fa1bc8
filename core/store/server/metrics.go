package server

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/mooncake-go/mooncake/core/store/master"
	pb "github.com/mooncake-go/mooncake/core/store/storepb"
)

// metrics are the master's Prometheus series, named after upstream's
// (prefix master_).
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	hits     prometheus.Counter
	misses   prometheus.Counter
}

func newMetrics(reg *prometheus.Registry, s *Server) *metrics {
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_rpc_requests_total", Help: "Master RPCs served, by method."}, []string{"method"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "master_rpc_latency_seconds", Help: "Master RPC service time, by method.",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10)}, []string{"method"}),
		hits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "master_mem_cache_hit_nums", Help: "GetReplicaList lookups that found a readable object."}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "master_mem_cache_miss_nums", Help: "GetReplicaList lookups that found nothing readable."}),
	}
	reg.MustRegister(m.requests, m.latency, m.hits, m.misses, newStatsCollector(s))
	return m
}

// statGauge is one pool-wide series read from master.Stats.
type statGauge struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(st *master.Stats) float64
}

// segGauge is one per-segment series (labels segment = name, segment_id)
// read from master.Stats.SegmentsDetail.
type segGauge struct {
	desc  *prometheus.Desc
	value func(g *master.SegmentStats) float64
}

// statsCollector exports master.Stats: it takes one snapshot per scrape
// (under the server's lock, no I/O) and emits every series from it, so the
// series of one scrape are consistent with each other. Segments appear and
// disappear with mounts.
type statsCollector struct {
	s    *Server
	pool []statGauge
	seg  []segGauge
}

func newStatsCollector(s *Server) *statsCollector {
	g := func(name, help string, f func(st *master.Stats) float64) statGauge {
		return statGauge{prometheus.NewDesc(name, help, nil, nil), prometheus.GaugeValue, f}
	}
	c := func(name, help string, f func(st *master.Stats) float64) statGauge {
		return statGauge{prometheus.NewDesc(name, help, nil, nil), prometheus.CounterValue, f}
	}
	segLabels := []string{"segment", "segment_id"}
	sg := func(name, help string, f func(g *master.SegmentStats) float64) segGauge {
		return segGauge{prometheus.NewDesc(name, help, segLabels, nil), f}
	}
	return &statsCollector{
		s: s,
		pool: []statGauge{
			g("master_allocated_bytes", "Bytes allocated to objects over all segments.", func(st *master.Stats) float64 { return float64(st.Used) }),
			g("master_total_capacity_bytes", "Bytes of all mounted segments.", func(st *master.Stats) float64 { return float64(st.Capacity) }),
			g("master_key_count", "Objects in the table.", func(st *master.Stats) float64 { return float64(st.Objects) }),
			g("master_segment_count", "Mounted segments.", func(st *master.Stats) float64 { return float64(st.Segments) }),
			g("master_active_clients", "Clients with a live TTL.", func(st *master.Stats) float64 { return float64(st.Clients) }),
			g("master_evicted_key_count", "Objects evicted since start.", func(st *master.Stats) float64 { return float64(st.EvictedObjects) }),
			g("master_evicted_size_bytes", "Bytes evicted since start.", func(st *master.Stats) float64 { return float64(st.EvictedBytes) }),
			c("master_attempted_evictions_total", "Eviction passes run (by watermark or for an allocation) since start.", func(st *master.Stats) float64 { return float64(st.EvictionRuns) }),
			c("master_put_start_alloc_failures_total", "PutStart calls that found no space even after eviction.", func(st *master.Stats) float64 { return float64(st.AllocFailures) }),
			g("master_put_start_discarded_staging_size", "Bytes of taken-over writes not yet released.", func(st *master.Stats) float64 { return float64(st.DiscardedBytes) }),
			c("master_put_start_partial_allocations_total", "PutStart calls that made fewer replicas than asked.", func(st *master.Stats) float64 { return float64(st.PartialPuts) }),
			c("master_put_start_striped_total", "PutStart calls that striped a replica over segments.", func(st *master.Stats) float64 { return float64(st.StripedPuts) }),
			g("master_soft_pin_key_count", "Objects put with a soft pin (evicted only after unpinned ones).", func(st *master.Stats) float64 { return float64(st.SoftPinned) }),
			g("master_hard_pin_key_count", "Objects put with a hard pin (never evicted).", func(st *master.Stats) float64 { return float64(st.HardPinned) }),
			// SSD tier.
			g("master_local_disk_capacity_bytes", "Bytes of all disk tiers (storage_root_dir size limits).", func(st *master.Stats) float64 { return float64(st.DiskCapacity) }),
			g("master_local_disk_used_bytes", "Value bytes of LOCAL_DISK replicas.", func(st *master.Stats) float64 { return float64(st.DiskUsed) }),
			g("master_local_disk_key_count", "Objects with a LOCAL_DISK replica.", func(st *master.Stats) float64 { return float64(st.DiskObjects) }),
			g("master_pending_offload_bytes", "DRAM bytes that offloads queued by eviction will free.", func(st *master.Stats) float64 { return float64(st.PendingOffloadBytes) }),
			c("master_offload_success_total", "Objects offloaded to a disk tier.", func(st *master.Stats) float64 { return float64(st.Offloads) }),
			c("master_offload_failures_total", "Offloads the owner reported failed.", func(st *master.Stats) float64 { return float64(st.OffloadFailures) }),
			c("master_file_cache_hit_nums", "Reads served from a disk tier (object staged back into DRAM).", func(st *master.Stats) float64 { return float64(st.DiskHits) }),
			c("master_file_cache_miss_nums", "Loads from a disk tier that failed (corrupt or missing file, or the tier left with its node; object dropped).", func(st *master.Stats) float64 { return float64(st.DiskMisses) }),
			c("master_evict_disk_replica_total", "LOCAL_DISK replicas dropped because the owner evicted the file (disk tier full).", func(st *master.Stats) float64 { return float64(st.DiskEvictions) }),
			c("master_tier_task_timeouts_total", "Disk tier tasks abandoned past their deadline.", func(st *master.Stats) float64 { return float64(st.TierTaskTimeouts) }),
		},
		seg: []segGauge{
			sg("master_segment_allocated_bytes", "Bytes allocated to objects in the segment.", func(g *master.SegmentStats) float64 { return float64(g.Used) }),
			sg("master_segment_capacity_bytes", "Bytes of the segment.", func(g *master.SegmentStats) float64 { return float64(g.Capacity) }),
			sg("master_segment_usage_ratio", "Allocated / capacity of the segment, in [0,1].", func(g *master.SegmentStats) float64 {
				if g.Capacity == 0 {
					return 0
				}
				return float64(g.Used) / float64(g.Capacity)
			}),
			sg("master_segment_key_count", "Objects with a replica in the segment.", func(g *master.SegmentStats) float64 { return float64(g.Objects) }),
			sg("master_segment_disk_capacity_bytes", "Bytes of the segment's disk tier (0 = none).", func(g *master.SegmentStats) float64 { return float64(g.DiskCapacity) }),
			sg("master_segment_disk_used_bytes", "Value bytes of LOCAL_DISK replicas on the segment's disk tier.", func(g *master.SegmentStats) float64 { return float64(g.DiskUsed) }),
		},
	}
}

// Describe implements prometheus.Collector.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range c.pool {
		ch <- g.desc
	}
	for _, g := range c.seg {
		ch <- g.desc
	}
}

// Collect implements prometheus.Collector.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	var st master.Stats
	c.s.Do(func(m *master.Master) { st = m.Stats() })
	for _, g := range c.pool {
		ch <- prometheus.MustNewConstMetric(g.desc, g.kind, g.value(&st))
	}
	for i := range st.SegmentsDetail {
		d := &st.SegmentsDetail[i]
		for _, g := range c.seg {
			ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, g.value(d), d.Name, d.ID)
		}
	}
}

func (m *metrics) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	m.observe(info.FullMethod, start)
	return resp, err
}

// observe counts one call of fullMethod (a gRPC full method name, e.g.
// storepb.Master_BatchGetReplicaList_FullMethodName) that started at start.
func (m *metrics) observe(fullMethod string, start time.Time) {
	method := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
	m.requests.WithLabelValues(method).Inc()
	m.latency.WithLabelValues(method).Observe(time.Since(start).Seconds())
}

func (m *metrics) lookups(rs []*pb.GetReplicaListResult) {
	for _, r := range rs {
		if r.Status.GetCode() == 0 {
			m.hits.Inc()
		} else {
			m.misses.Inc()
		}
	}
}

// HTTPHandler serves /metrics (Prometheus text) and /health (JSON
// {"status":"ok","role":"leader"}), as upstream's metrics port.
func (s *Server) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"ok","role":"leader"}` + "\n"))
	})
	return mux
}
