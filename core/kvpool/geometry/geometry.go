package geometry

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrUnknownModel is matched (with errors.Is) by Lookup's error for a name
// that is not a preset.
var ErrUnknownModel = errors.New("geometry: unknown model")

// Model is the KV-cache geometry of one model.
type Model struct {
	// Name identifies the model, e.g. "llama3-70b".
	Name string
	// Layers is the number of transformer layers that keep KV cache.
	Layers int
	// KVHeads is the number of key/value heads per layer (fewer than the
	// query heads under GQA). Unused when MLA is set.
	KVHeads int
	// HeadDim is the size of one head's key (and value) vector, in
	// elements. Unused when MLA is set.
	HeadDim int
	// DTypeBytes is the size of one cached element in bytes (2 for bf16
	// or fp16, 1 for fp8).
	DTypeBytes int
	// MLA is set for multi-head latent attention, where each layer caches
	// a single MLADim-element latent vector per token instead of K and V.
	MLA bool
	// MLADim is the number of elements cached per token per layer under
	// MLA (kv_lora_rank + qk_rope_head_dim; 512 + 64 = 576 for
	// DeepSeek-V3). Unused unless MLA is set.
	MLADim int
}

// BytesPerToken returns the bytes of KV cache one token occupies across
// all layers: 2 * Layers * KVHeads * HeadDim * DTypeBytes (K and V), or
// Layers * MLADim * DTypeBytes when MLA is set. Fields are not validated;
// a zero field gives 0.
func (m Model) BytesPerToken() int64 {
	if m.MLA {
		return int64(m.Layers) * int64(m.MLADim) * int64(m.DTypeBytes)
	}
	return 2 * int64(m.Layers) * int64(m.KVHeads) * int64(m.HeadDim) * int64(m.DTypeBytes)
}

// bf16 is the element size of bfloat16, in bytes.
const bf16 = 2

// presets returns the preset models, sorted by name. Values come from the
// models' published configs (num_hidden_layers, num_key_value_heads,
// head_dim, kv_lora_rank + qk_rope_head_dim), cached in bf16.
func presets() []Model {
	return []Model{
		// 61 layers, kv_lora_rank 512 + qk_rope_head_dim 64: 70,272 B/token.
		{Name: "deepseek-v3", Layers: 61, DTypeBytes: bf16, MLA: true, MLADim: 576},
		// 80 layers, 8 KV heads of 128: 327,680 B/token, the FAST'25
		// paper's 320 KB/token.
		{Name: "llama3-70b", Layers: 80, KVHeads: 8, HeadDim: 128, DTypeBytes: bf16},
		// 32 layers, 8 KV heads of 128: 131,072 B/token.
		{Name: "llama3-8b", Layers: 32, KVHeads: 8, HeadDim: 128, DTypeBytes: bf16},
		// 28 layers, 4 KV heads of 128: 57,344 B/token.
		{Name: "qwen2.5-7b", Layers: 28, KVHeads: 4, HeadDim: 128, DTypeBytes: bf16},
		// A toy shape for tests: 32 B/token.
		{Name: "test-tiny", Layers: 2, KVHeads: 1, HeadDim: 4, DTypeBytes: bf16},
	}
}

// Lookup returns the preset model called name, compared case-insensitively
// (surrounding spaces ignored). For an unknown name it returns an error
// matching ErrUnknownModel that quotes name and lists the known names.
func Lookup(name string) (Model, error) {
	key := strings.ToLower(strings.TrimSpace(name))
	for _, m := range presets() {
		if m.Name == key {
			return m, nil
		}
	}
	return Model{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownModel, name, strings.Join(Names(), ", "))
}

// Names returns the names of the preset models, sorted; the slice is a
// fresh copy the caller may modify.
func Names() []string {
	ps := presets()
	names := make([]string, len(ps))
	for i, m := range ps {
		names[i] = m.Name
	}
	slices.Sort(names)
	return names
}
