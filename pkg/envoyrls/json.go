package envoyrls

import (
	"io"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds the body of a /json request.
const maxJSONBody = 1 << 20

// JSONHandler serves the RateLimitService over HTTP as envoyproxy/ratelimit's
// /json endpoint does: POST a RateLimitRequest as JSON; the answer is the
// RateLimitResponse as JSON, with status 200 when OK and 429 when over the
// limit (400 for a malformed request, 503 when the store failed).
func JSONHandler(s *RateLimitServer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST a RateLimitRequest as JSON", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		if err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		var req rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, "the body is not a RateLimitRequest in JSON: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := s.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			st := status.Convert(err)
			code := http.StatusInternalServerError
			switch st.Code() {
			case codes.InvalidArgument:
				code = http.StatusBadRequest
			case codes.Unavailable:
				code = http.StatusServiceUnavailable
			}
			http.Error(w, st.Message(), code)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(out)
	})
}
