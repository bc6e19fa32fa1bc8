package httpmeta

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/mooncake-go/mooncake/core/metadata"
)

// DefaultMaxValueBytes is the largest value the Handler accepts in a PUT and
// the Client accepts in a GET response unless configured otherwise (64 MiB).
// Upstream's Go example server sets no limit; a descriptor of an engine with
// tens of thousands of buffers is a few MiB.
const DefaultMaxValueBytes int64 = 64 << 20

// Response bodies of the protocol, as upstream's servers send them.
const (
	msgNotFound = "metadata not found"
	msgUpdated  = "metadata updated"
	msgDeleted  = "metadata deleted"
)

// jsonContentType is the content type upstream's servers send with a value.
const jsonContentType = "application/json; charset=utf-8"

// allowedMethods is the Allow header of a 405 response.
const allowedMethods = "GET, PUT, DELETE"

// HandlerOption configures NewHandler.
type HandlerOption func(*handler)

// WithMaxBodyBytes caps the size of a PUT body; a larger body is answered
// with 413 and not stored. n <= 0 selects DefaultMaxValueBytes.
func WithMaxBodyBytes(n int64) HandlerOption {
	return func(h *handler) {
		if n <= 0 {
			n = DefaultMaxValueBytes
		}
		h.maxBody = n
	}
}

type handler struct {
	store   metadata.Store
	maxBody int64
}

// NewHandler returns an http.Handler serving upstream's HTTP metadata
// protocol from store, on whatever path it is mounted at (the path is not
// inspected). Responses:
//
//   - GET ?key=K: 200 with the value (Content-Type application/json, as
//     upstream), or 404 "metadata not found".
//   - PUT ?key=K with the value as body: 200 "metadata updated". A body over
//     the cap (WithMaxBodyBytes, default DefaultMaxValueBytes) gets 413; an
//     unreadable body gets 400 "invalid request", as upstream.
//   - DELETE ?key=K: 200 "metadata deleted", or 404 "metadata not found" for
//     an unknown key, as the server embedded in mooncake_master (the upstream
//     example server answers 200 either way).
//   - A missing or empty key, or a malformed query string: 400.
//   - Any other method: 405 with an Allow header.
//   - Any other Store error: 500 naming the error.
//
// Store calls get the request's context. NewHandler panics if store is nil
// (a programmer error).
func NewHandler(store metadata.Store, opts ...HandlerOption) http.Handler {
	if store == nil {
		panic("httpmeta: NewHandler with nil store")
	}
	h := &handler{store: store, maxBody: DefaultMaxValueBytes}
	for _, o := range opts {
		o(h)
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodPut, http.MethodDelete:
	default:
		w.Header().Set("Allow", allowedMethods)
		writeText(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed; use %s", r.Method, allowedMethods))
		return
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeText(w, http.StatusBadRequest, "invalid query string: "+err.Error())
		return
	}
	key := q.Get("key")
	if key == "" {
		writeText(w, http.StatusBadRequest, "missing key query parameter")
		return
	}
	ctx := r.Context()
	switch r.Method {
	case http.MethodGet:
		v, err := h.store.Get(ctx, key)
		if err != nil {
			h.storeError(w, err)
			return
		}
		w.Header().Set("Content-Type", jsonContentType)
		w.Header().Set("Content-Length", strconv.Itoa(len(v)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(v) // a write error means the client went away
	case http.MethodPut:
		if r.ContentLength > h.maxBody {
			h.tooLarge(w)
			return
		}
		body, err := readAllSized(http.MaxBytesReader(w, r.Body, h.maxBody), r.ContentLength)
		if err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				h.tooLarge(w)
				return
			}
			writeText(w, http.StatusBadRequest, "invalid request")
			return
		}
		if err := h.store.Put(ctx, key, body); err != nil {
			h.storeError(w, err)
			return
		}
		writeText(w, http.StatusOK, msgUpdated)
	case http.MethodDelete:
		if err := h.store.Delete(ctx, key); err != nil {
			h.storeError(w, err)
			return
		}
		writeText(w, http.StatusOK, msgDeleted)
	}
}

func (h *handler) tooLarge(w http.ResponseWriter) {
	writeText(w, http.StatusRequestEntityTooLarge,
		fmt.Sprintf("metadata value too large: limit is %d bytes", h.maxBody))
}

func (h *handler) storeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, metadata.ErrNotFound):
		writeText(w, http.StatusNotFound, msgNotFound)
	case errors.Is(err, metadata.ErrInvalidKey):
		writeText(w, http.StatusBadRequest, "invalid key: "+err.Error())
	default:
		writeText(w, http.StatusInternalServerError, "metadata store error: "+err.Error())
	}
}

// writeText sends a short status message. Messages go out as text/plain;
// clients of the protocol look only at the status code.
func writeText(w http.ResponseWriter, code int, msg string) {
	hdr := w.Header()
	hdr.Set("Content-Type", "text/plain; charset=utf-8")
	hdr.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg)
}
