package transfer

import (
	"context"
	"sync"
	"time"
)

// requestCtx is the context of one request: its parent's values and
// cancellation plus a deadline, like context.WithDeadline, but the timer
// behind Done is made only when something asks for Done. Synchronous
// transports (shm, local copies) only ask Err, so a batch of many small
// requests pays no timer per request; transports that block on I/O call
// Done and get the usual timer.
type requestCtx struct {
	context.Context // the parent
	deadline        time.Time

	once  sync.Once
	done  chan struct{}
	stop  func() bool // stops the timer
	unreg func() bool // stops watching the parent
	mu    sync.Mutex
	err   error // set when done is closed
}

// withRequestDeadline returns a context that ends at d or with parent, and
// a function that releases it (always call it).
func withRequestDeadline(parent context.Context, d time.Time) (*requestCtx, func()) {
	c := &requestCtx{Context: parent, deadline: d}
	return c, c.release
}

func (c *requestCtx) Deadline() (time.Time, bool) {
	if pd, ok := c.Context.Deadline(); ok && pd.Before(c.deadline) {
		return pd, true
	}
	return c.deadline, true
}

func (c *requestCtx) Err() error {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *requestCtx) Done() <-chan struct{} {
	c.once.Do(func() {
		c.done = make(chan struct{})
		if err := c.Err(); err != nil {
			c.finish(err)
			return
		}
		t := time.AfterFunc(time.Until(c.deadline), func() { c.finish(context.DeadlineExceeded) })
		c.stop = t.Stop
		c.unreg = context.AfterFunc(c.Context, func() { c.finish(c.Context.Err()) })
	})
	return c.done
}

// finish closes done with err, once.
func (c *requestCtx) finish(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.done)
	}
}

// release stops the timer and the parent watch, if Done made them; a
// later Done returns a closed channel (Err: context.Canceled), as a
// cancelled context.WithDeadline would.
func (c *requestCtx) release() {
	c.once.Do(func() {
		c.done = make(chan struct{})
		c.finish(context.Canceled)
	})
	if c.stop != nil {
		c.stop()
	}
	if c.unreg != nil {
		c.unreg()
	}
}
