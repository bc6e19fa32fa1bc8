package pd

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// helperEnv, when set, makes the test binary run producerHelper instead of
// the tests (see TestMain); its value is the transfer id to send.
const helperEnv = "MC_PD_TEST_PRODUCER"

// helperBlocks are the producer blocks the helper sends; the consumer
// receives them into helperDst.
var (
	helperBlocks = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	helperDst    = []int{5, 6, 7, 8, 9, 10, 11, 12, 13, 2, 3}
)

// producerHelper is the prefill process of TestTwoProcesses: it maps its
// regions with the producer pattern, serves the bootstrap on a free port,
// prints "BOOTSTRAP <addr>", marks the transfer Ready, waits until it was
// sent (or 30 s), prints "SENT" and exits 0.
func producerHelper() int {
	id := os.Getenv(helperEnv)
	rs, err := mapRegions(producerSeed)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	regs := make([]Region, len(rs))
	for i, r := range rs {
		regs[i] = r.Region
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := NewProducer(ctx, Config{EngineID: "prefill-process", BootstrapAddr: "127.0.0.1:0", Regions: regs, AbortTimeout: 30 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer p.Close()
	if err := p.Ready(id, helperBlocks); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Printf("BOOTSTRAP %s\n", p.BootstrapAddr())
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		for _, f := range p.Finished() {
			if f == id {
				fmt.Println("SENT")
				return 0
			}
		}
		<-tick.C
	}
	fmt.Fprintln(os.Stderr, "transfer not sent within 30 s")
	return 3
}

// TestTwoProcesses moves a prompt's KV from a producer process (this test
// binary re-executed) into this process's consumer regions over tcp and
// checks the bytes.
func TestTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const id = "xfer-two-processes"
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+id)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	sc := bufio.NewScanner(out)
	var boot string
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "BOOTSTRAP "); ok {
			boot = a
			break
		}
	}
	if boot == "" {
		t.Fatalf("producer process printed no bootstrap address (%v)", sc.Err())
	}

	cr := regions(t, consumerSeed)
	c, err := NewConsumer(ctx, Config{EngineID: "decode-process", Regions: cr, RecvTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Recv(id, "http://"+boot, "prefill-process", helperDst); err != nil {
		t.Fatal(err)
	}
	if r := result(t, c, id); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := checkBlocksLanded(cr, producerSeed, consumerSeed, helperBlocks, helperDst); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for sc.Scan() {
		rest = append(rest, sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("producer process: %v (stdout %q)", err, rest)
	}
	if len(rest) == 0 || rest[len(rest)-1] != "SENT" {
		t.Fatalf("producer process stdout after bootstrap: %q", rest)
	}
}
