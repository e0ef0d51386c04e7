package main

// The hook's Prometheus endpoint. With FRAGSIM_METRICS_ADDR=[HOST]:PORT in
// the program's environment (fragsim record passes it on), recording also
// serves http://HOST:PORT/metrics: the metrics of fragsim.monitor
// (replay/monitor.Metrics), computed at each scrape from the model of
// PyTorch's allocator (model.go), which then runs on every device from its
// first use, and from the device's last memory sample (every 100 ms while
// recording). The allocator's figures are the model's: what PyTorch's
// allocator would hold, not the recording allocator's pool; the memory
// outside the allocator is the device's less the pool's (what this
// process really holds) less its free memory. A scrape that finds the
// silent-OOM risk turned on writes its warning to stderr, once per
// crossing.

/*
#include <stdint.h>
#include "hook.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fragsim/fragsim/replay/driver"
	"github.com/fragsim/fragsim/replay/monitor"
	"github.com/fragsim/fragsim/trace"
)

// metricsAddr is the variable that turns the endpoint on.
const metricsAddr = "FRAGSIM_METRICS_ADDR"

var metricsOnce sync.Once

// startMetrics starts the endpoint once, when FRAGSIM_METRICS_ADDR is set:
// the model runs from then on. A failure is said on stderr; recording
// goes on.
func startMetrics() {
	addr := os.Getenv(metricsAddr)
	if addr == "" {
		return
	}
	metricsOnce.Do(func() {
		C.fs_metrics_enable()
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fragsim: %s=%s: %v; the metrics are not served\n", metricsAddr, addr, err)
			return
		}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(newCollector())
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				fmt.Fprintf(os.Stderr, "fragsim: metrics: %v\n", err)
			}
		}()
	})
}

// collector computes the metrics at each scrape.
type collector struct {
	descs []*prometheus.Desc
	mu    sync.Mutex // guards mon: scrapes may come at once
	mon   *monitor.Monitor
}

func newCollector() *collector {
	c := &collector{mon: monitor.New(monitor.Options{})}
	for _, m := range monitor.Metrics {
		c.descs = append(c.descs, prometheus.NewDesc(m.Name, m.Help, []string{monitor.LabelDevice}, nil))
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector: each device with a model.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for dev := range models {
		m := models[dev].Load()
		if m == nil {
			continue
		}
		g := c.mon.Observe(m.sample(dev))
		if g.RiskCrossed {
			fmt.Fprintf(os.Stderr, "fragsim: %s\n", g.Warning())
		}
		label := strconv.Itoa(dev)
		for i, mt := range monitor.Metrics {
			if mt.Device && !g.DeviceKnown {
				continue
			}
			t := prometheus.GaugeValue
			if mt.Type == "counter" {
				t = prometheus.CounterValue
			}
			ch <- prometheus.MustNewConstMetric(c.descs[i], t, mt.Value(&g), label)
		}
	}
}

// sample reads the model of device dev and the device's last memory
// sample.
func (m *model) sample(dev int) monitor.Sample {
	s := monitor.Sample{TimeNS: time.Now().UnixNano(), Device: dev}
	var free, total, pool, ooms C.uint64_t
	if C.fs_device_mem(C.int(dev), &free, &total, &pool, &ooms) != 0 && free <= total {
		held := uint64(pool)
		s.DeviceFreeBytes, s.DeviceTotalBytes, s.HeldBytes = uint64(free), uint64(total), &held
	}
	m.mu.Lock()
	if in, ok := m.pol.(driver.Inspector); ok {
		in.Segments(func(seg trace.Segment) bool {
			s.Layout.Add(seg)
			return true
		})
	}
	st := m.pol.Stats()
	peak := m.peak
	m.mu.Unlock()
	l := &s.Layout
	s.Counters = &monitor.Counters{ReservedBytes: l.ReservedBytes, AllocatedBytes: l.AllocatedBytes,
		InactiveSplitBytes: l.StrandedBytes, OOMs: uint64(ooms), AllocRetries: uint64(max(st.AllocRetries, 0))}
	s.Peak = &peak
	return s
}
