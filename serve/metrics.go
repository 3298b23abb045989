package serve

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus metrics, in a registry of its own
// (so that several servers, as in tests, do not collide), with the Go
// runtime's and the process's.
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	rejected     *prometheus.CounterVec
	promptTokens prometheus.Counter
	generated    prometheus.Counter
	queue        prometheus.Gauge
	active       prometheus.Gauge
	ttft         prometheus.Histogram
	itl          prometheus.Histogram
	nonFinite    prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "polysketch_requests_total", Help: "HTTP requests answered, by path and status code.",
		}, []string{"path", "code"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "polysketch_rejected_requests_total", Help: "Requests answered with an error, by the error's code (invalid_api_key, queue_full, ...).",
		}, []string{"reason"}),
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "polysketch_prompt_tokens_total", Help: "Prompt tokens read by the model.",
		}),
		generated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "polysketch_generated_tokens_total", Help: "Tokens generated.",
		}),
		queue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "polysketch_queue_depth", Help: "Sequences waiting for a slot.",
		}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "polysketch_active_sequences", Help: "Sequences being decoded.",
		}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "polysketch_time_to_first_token_seconds", Help: "From a request's arrival to its first generated token.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		itl: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "polysketch_inter_token_latency_seconds", Help: "Between consecutive tokens of a sequence.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		nonFinite: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "polysketch_nonfinite_logits_total", Help: "Sequences ended because the model's logits were not finite (NaN or infinite): a model whose weights or activations overflow.",
		}),
	}
	m.reg.MustRegister(m.requests, m.rejected, m.promptTokens, m.generated, m.queue, m.active, m.ttft, m.itl, m.nonFinite,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// logBurst bounds the lines a server logs for failed requests each
// second: a client sending bad requests in a loop must not fill the disk.
const logBurst = 10

// rejectLog rate-limits the log lines of failed requests: logBurst per
// second, each window's first line saying how many the last windows
// dropped (the metrics count them all).
type rejectLog struct {
	mu      sync.Mutex
	window  time.Time // start of the current second
	logged  int       // lines in it
	dropped int       // lines not logged since the last one logged
}

// allow reports whether a line may be logged now, and how many were
// dropped before it.
func (l *rejectLog) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.window) >= time.Second || now.Before(l.window) {
		l.window, l.logged = now, 0
	}
	if l.logged >= logBurst {
		l.dropped++
		return false, 0
	}
	l.logged++
	d := l.dropped
	l.dropped = 0
	return true, d
}
