package transfer

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRequestDeadline(t *testing.T) {
	t.Run("err without done", func(t *testing.T) {
		ctx, release := withRequestDeadline(context.Background(), time.Now().Add(-time.Millisecond))
		defer release()
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err past the deadline = %v", ctx.Err())
		}
		select {
		case <-ctx.Done():
		default:
			t.Fatal("Done of an expired context is not closed")
		}
	})
	t.Run("done at the deadline", func(t *testing.T) {
		ctx, release := withRequestDeadline(context.Background(), time.Now().Add(20*time.Millisecond))
		defer release()
		if ctx.Err() != nil {
			t.Fatalf("Err before the deadline = %v", ctx.Err())
		}
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > 20*time.Millisecond {
			t.Fatalf("Deadline = %v, %v", d, ok)
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Done not closed 10 s after a 20 ms deadline")
		}
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err = %v", ctx.Err())
		}
	})
	t.Run("parent cancel", func(t *testing.T) {
		parent, cancel := context.WithCancel(context.Background())
		ctx, release := withRequestDeadline(parent, time.Now().Add(time.Hour))
		defer release()
		done := ctx.Done()
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("parent cancel did not close Done")
		}
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("Err = %v", ctx.Err())
		}
		type key struct{}
		p2 := context.WithValue(context.Background(), key{}, 7)
		c2, r2 := withRequestDeadline(p2, time.Now().Add(time.Hour))
		defer r2()
		if c2.Value(key{}) != 7 {
			t.Fatal("parent value lost")
		}
	})
	t.Run("released", func(t *testing.T) {
		ctx, release := withRequestDeadline(context.Background(), time.Now().Add(time.Hour))
		_ = ctx.Done() // starts the timer
		release()
		ctx2, release2 := withRequestDeadline(context.Background(), time.Now().Add(time.Hour))
		release2()
		select {
		case <-ctx2.Done(): // Done after release: closed, not a nil channel
		case <-time.After(10 * time.Second):
			t.Fatal("Done after release blocks")
		}
	})
}
