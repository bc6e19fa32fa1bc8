package pipeline_test

import (
	"context"
	"fmt"

	"github.com/mooncake-go/mooncake/core/kvpool/pipeline"
)

// A step that saves each layer as soon as it is computed and loads the
// next step's layers ahead of the consumer.
func Example() {
	ctx := context.Background()
	saved := make([]bool, 4)
	save := func(ctx context.Context, layer int) error { saved[layer] = true; return nil }
	s, _ := pipeline.NewSaver(save, pipeline.Config{Window: 2})
	defer s.Close()
	for layer := range 4 {
		// ... compute layer ...
		if err := s.SaveLayer(ctx, layer); err != nil {
			fmt.Println(err)
		}
	}
	fmt.Println("saves:", s.WaitAll(ctx), saved)

	load := func(ctx context.Context, layer int) error { return nil }
	p, _ := pipeline.NewPrefetcher(load, pipeline.Config{Window: 2})
	defer p.Close()
	_ = p.Start(4)
	for layer := range 4 {
		if err := p.WaitLayer(ctx, layer); err != nil {
			fmt.Println(err)
		}
		// ... read layer ...
	}
	fmt.Println("loaded 4 layers")
	// Output:
	// saves: <nil> [true true true true]
	// loaded 4 layers
}
