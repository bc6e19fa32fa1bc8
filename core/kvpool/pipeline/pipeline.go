package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors returned by this package; match with errors.Is. Deadlines and
// cancellations are reported by wrapping the context's error, so
// errors.Is(err, context.DeadlineExceeded) also works.
var (
	// ErrInvalidConfig is matched by every Config.Validate error.
	ErrInvalidConfig = errors.New("pipeline: invalid config")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("pipeline: closed")
	// ErrBusy is returned by Prefetcher.Start while the previous pass
	// still has loads outstanding.
	ErrBusy = errors.New("pipeline: previous pass still loading")
	// ErrNoPass is returned by WaitLayer before the first Start.
	ErrNoPass = errors.New("pipeline: no pass started")
	// ErrLayerRange is returned for a layer outside the pass.
	ErrLayerRange = errors.New("pipeline: layer out of range")
	// ErrCanceled is the error of a layer that was never loaded because
	// its pass was cancelled.
	ErrCanceled = errors.New("pipeline: pass canceled")
)

// LayerFunc saves or loads one layer. It must return when ctx is done.
type LayerFunc func(ctx context.Context, layer int) error

// Defaults applied by Config for zero fields.
const (
	DefaultWindow  = 2
	DefaultWorkers = 1
	DefaultTimeout = 30 * time.Second
)

// Config bounds a Saver or Prefetcher. The zero value is valid and means
// the defaults.
type Config struct {
	// Window is the most layers held at once (Saver: pending saves;
	// Prefetcher: layers loaded or loading ahead of the consumer).
	// 0 means DefaultWindow.
	Window int
	// Workers is the most LayerFunc calls running at once; 1 <= Workers
	// <= Window. 0 means min(DefaultWorkers, Window).
	Workers int
	// Timeout bounds every wait (on top of the caller's context) and every
	// LayerFunc call. 0 means DefaultTimeout.
	Timeout time.Duration
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Workers == 0 {
		c.Workers = min(DefaultWorkers, c.Window)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// Validate reports the first problem with c (after defaults), as an error
// matching ErrInvalidConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Window < 1:
		return fmt.Errorf("%w: Window %d, want >= 1", ErrInvalidConfig, c.Window)
	case c.Workers < 1 || c.Workers > c.Window:
		return fmt.Errorf("%w: Workers %d outside [1, Window=%d]", ErrInvalidConfig, c.Workers, c.Window)
	case c.Timeout < 0:
		return fmt.Errorf("%w: Timeout %v, want >= 0", ErrInvalidConfig, c.Timeout)
	}
	return nil
}

// bound returns ctx limited additionally by d.
func bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}
