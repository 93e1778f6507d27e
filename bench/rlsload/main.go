// Command rlsload drives a rate limit service (envoy.service.ratelimit.v3)
// over gRPC for a fixed time and reports decisions per second, latency
// percentiles and, for the processes named by -pids, the CPU they used per
// decision (from /proc/PID/stat). bench/rls.sh runs it against edge and
// Lyft's ratelimit with the same configuration and descriptors.
//
// Each call asks for one domain and -descriptors descriptors, all naming
// one client address drawn at random from -keys addresses:
// remote_address=ADDR and, with two descriptors, path=/api then
// remote_address=ADDR (the nested entry of bench/conf/rls/bench.yaml).
// A decision is one call.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "the service's gRPC address")
	domain := flag.String("domain", "bench", "the domain asked for")
	duration := flag.Duration("duration", 5*time.Second, "how long to measure")
	warmup := flag.Duration("warmup", time.Second, "unmeasured load before measuring")
	conns := flag.Int("conns", 4, "gRPC connections")
	workers := flag.Int("workers", 64, "calls in flight")
	keys := flag.Int("keys", 10000, "distinct client addresses")
	ndesc := flag.Int("descriptors", 2, "descriptors per call, 1 or 2")
	pids := flag.String("pids", "", "comma-separated PIDs whose CPU is measured")
	label := flag.String("label", "", "the name printed on the result line")
	flag.Parse()

	clients := make([]pb.RateLimitServiceClient, *conns)
	for i := range clients {
		conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fmt.Fprintln(os.Stderr, "rlsload:", err)
			os.Exit(1)
		}
		defer conn.Close()
		clients[i] = pb.NewRateLimitServiceClient(conn)
	}
	reqs := make([]*pb.RateLimitRequest, *keys)
	for i := range reqs {
		ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		ds := []*rlspb.RateLimitDescriptor{{Entries: []*rlspb.RateLimitDescriptor_Entry{{Key: "remote_address", Value: ip}}}}
		if *ndesc == 2 {
			ds = append(ds, &rlspb.RateLimitDescriptor{Entries: []*rlspb.RateLimitDescriptor_Entry{
				{Key: "path", Value: "/api"}, {Key: "remote_address", Value: ip}}})
		}
		reqs[i] = &pb.RateLimitRequest{Domain: *domain, Descriptors: ds}
	}

	var measuring atomic.Bool
	var stop atomic.Bool
	var errs, over atomic.Int64
	lat := make([][]time.Duration, *workers)
	var wg sync.WaitGroup
	for w := range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[w%len(clients)]
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for !stop.Load() {
				req := reqs[r.IntN(len(reqs))]
				t0 := time.Now()
				resp, err := c.ShouldRateLimit(context.Background(), req)
				d := time.Since(t0)
				if !measuring.Load() {
					continue
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
					over.Add(1)
				}
				lat[w] = append(lat[w], d)
			}
		}()
	}
	time.Sleep(*warmup)
	cpu0 := cpuOf(*pids)
	t0 := time.Now()
	measuring.Store(true)
	time.Sleep(*duration)
	measuring.Store(false)
	elapsed := time.Since(t0)
	cpu1 := cpuOf(*pids)
	stop.Store(true)
	wg.Wait()

	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	n := len(all)
	if n == 0 {
		fmt.Fprintln(os.Stderr, "rlsload: no successful call; errors:", errs.Load())
		os.Exit(1)
	}
	pct := func(p float64) time.Duration { return all[min(int(float64(n)*p), n-1)] }
	cpu := cpu1 - cpu0
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fmt.Printf("%s decisions=%d decisions/s=%.0f p50_ms=%.2f p99_ms=%.2f over_limit=%d errors=%d cpu_s=%.2f cpu_us/decision=%.1f decisions/cpu_s=%.0f\n",
		*label, n, float64(n)/elapsed.Seconds(), ms(pct(0.50)), ms(pct(0.99)),
		over.Load(), errs.Load(), cpu, cpu*1e6/float64(n), float64(n)/cpu)
}

// cpuOf returns the user and system CPU seconds of the processes pids
// names, from /proc/PID/stat (fields 14 and 15, in clock ticks of 1/100 s,
// Linux's USER_HZ).
func cpuOf(pids string) float64 {
	var total float64
	for _, p := range strings.Split(pids, ",") {
		if p == "" {
			continue
		}
		b, err := os.ReadFile("/proc/" + p + "/stat")
		if err != nil {
			fmt.Fprintln(os.Stderr, "rlsload:", err)
			os.Exit(1)
		}
		s := string(b)
		// The command name, field 2, is in parentheses and may hold spaces.
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		u, _ := strconv.ParseFloat(f[11], 64)
		k, _ := strconv.ParseFloat(f[12], 64)
		total += (u + k) / 100
	}
	return total
}
