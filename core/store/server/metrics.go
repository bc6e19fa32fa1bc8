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
	stat := func(name, help string, f func(st master.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			var v float64
			s.Do(func(mm *master.Master) { v = f(mm.Stats()) })
			return v
		})
	}
	reg.MustRegister(m.requests, m.latency, m.hits, m.misses,
		stat("master_allocated_bytes", "Bytes allocated to objects over all segments.", func(st master.Stats) float64 { return float64(st.Used) }),
		stat("master_total_capacity_bytes", "Bytes of all mounted segments.", func(st master.Stats) float64 { return float64(st.Capacity) }),
		stat("master_key_count", "Objects in the table.", func(st master.Stats) float64 { return float64(st.Objects) }),
		stat("master_segment_count", "Mounted segments.", func(st master.Stats) float64 { return float64(st.Segments) }),
		stat("master_active_clients", "Clients with a live TTL.", func(st master.Stats) float64 { return float64(st.Clients) }),
		stat("master_evicted_key_count", "Objects evicted since start.", func(st master.Stats) float64 { return float64(st.EvictedObjects) }),
		stat("master_evicted_size_bytes", "Bytes evicted since start.", func(st master.Stats) float64 { return float64(st.EvictedBytes) }),
	)
	return m
}

func (m *metrics) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
	start := time.Now()
	resp, err := h(ctx, req)
	m.requests.WithLabelValues(method).Inc()
	m.latency.WithLabelValues(method).Observe(time.Since(start).Seconds())
	return resp, err
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
