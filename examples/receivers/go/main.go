// A receiver for `idemgate worker --deliver`, with Go's standard library
// only: verifies each request the Standard Webhooks way, does the work once
// per run key, answers 204.
//
//	PORT=8000 IDEMGATE_DELIVER_SECRET=whsec_... go run .
//
// The dedupe is in memory: a restart forgets it. Keep the run keys in your
// database, in the transaction that does the work, to survive one.
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const tolerance = 5 * time.Minute

// verified reports whether one of the space-separated `v1,<base64>` entries
// of webhook-signature is the HMAC-SHA256 of `id.timestamp.body` (the raw
// bytes, as signed) and the timestamp is within 5 minutes of now.
func verified(key []byte, h http.Header, body []byte) bool {
	id, timestamp, signatures := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	seconds, err := strconv.ParseInt(timestamp, 10, 64)
	if id == "" || signatures == "" || err != nil || strings.Trim(timestamp, "0123456789") != "" {
		return false // integer seconds: digits only
	}
	if math.Abs(time.Since(time.Unix(seconds, 0)).Seconds()) > tolerance.Seconds() {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	expected := mac.Sum(nil)
	for _, entry := range strings.Split(signatures, " ") {
		version, signature, _ := strings.Cut(entry, ",")
		given, err := base64.StdEncoding.DecodeString(signature)
		if version == "v1" && err == nil && hmac.Equal(given, expected) {
			return true
		}
	}
	return false
}

// doTheWork is your code. run is the JSON object idemgate sends: run_id,
// provider, repo, action, number, delivery_id, attempt, and payload (the
// event as the provider sent it) when the provider keeps it.
func doTheWork(run map[string]any) error {
	return nil
}

func main() {
	secret := os.Getenv("IDEMGATE_DELIVER_SECRET") // one whsec_... value
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	// whsec_ and base64, or the receiver stops here (the message never shows the value).
	if !strings.HasPrefix(secret, "whsec_") || err != nil || len(key) == 0 {
		log.Fatal("IDEMGATE_DELIVER_SECRET must be a whsec_... secret (whsec_ and base64)")
	}
	port := os.Getenv("PORT")
	if port == "" {
		port = "8000"
	}
	var mu sync.Mutex
	handled := map[string]bool{} // run keys whose work is done

	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
		if err != nil || r.Method != http.MethodPost || !verified(key, r.Header, body) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		runKey := r.Header.Get("webhook-id") // the same on every attempt of one run
		// One run's requests never overlap (idemgate leases each run to one
		// attempt at a time); the lock guards the map against other runs.
		mu.Lock()
		done := handled[runKey]
		mu.Unlock()
		if done {
			fmt.Println("duplicate", runKey)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		var run map[string]any
		if err := json.Unmarshal(body, &run); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if err := doTheWork(run); err != nil {
			fmt.Fprintln(os.Stderr, "failed", runKey, err)
			w.WriteHeader(http.StatusInternalServerError) // idemgate retries it
			return
		}
		mu.Lock()
		handled[runKey] = true
		mu.Unlock()
		fmt.Println("handled", runKey)
		w.WriteHeader(http.StatusNoContent)
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:"+port, nil))
}
