// A receiver for `idemgate worker --deliver`, with Go's standard library
// only: verifies each request the Standard Webhooks way, does the work once
// per run key, answers 204.
//
//	PORT=8000 IDEMGATE_DELIVER_SECRET=whsec_... go run .
//	PORT=8000 IDEMGATE_DELIVER_PUBLIC_KEY=whpk_... go run .
//
// With IDEMGATE_DELIVER_SECRET (a whsec_ secret) it verifies `v1` entries
// (HMAC-SHA256); with IDEMGATE_DELIVER_PUBLIC_KEY (the whpk_ key `idemgate
// destinations keys` prints) it verifies `v1a` entries (ed25519, with
// crypto/ed25519). Give either, or both while the destination switches.
//
// The dedupe is in memory: a restart forgets it. Keep the run keys in your
// database, in the transaction that does the work, to survive one.
//
// For an ordered provider (`order_by`) it also checks each key's chain, in
// memory: a run whose Idemgate-Order-Previous is not the run it handled last
// for its Idemgate-Order-Key prints a `gap` line.
package main

import (
	"crypto/ed25519"
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

// keys holds what verifies: the whsec_ secret's bytes (`v1`) and the whpk_
// public key (`v1a`), either of which may be absent.
type keys struct {
	secret    []byte
	publicKey ed25519.PublicKey
}

// verified reports whether the timestamp is within 5 minutes of now and one
// of the space-separated entries of webhook-signature verifies
// `id.timestamp.body` (the raw bytes, as signed) with its own scheme's key:
// `v1,<base64>` the HMAC-SHA256 under the secret, `v1a,<base64>` an ed25519
// signature under the public key.
func verified(k keys, h http.Header, body []byte) bool {
	id, timestamp, signatures := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	seconds, err := strconv.ParseInt(timestamp, 10, 64)
	if id == "" || signatures == "" || err != nil || strings.Trim(timestamp, "0123456789") != "" {
		return false // integer seconds: digits only
	}
	if math.Abs(time.Since(time.Unix(seconds, 0)).Seconds()) > tolerance.Seconds() {
		return false
	}
	signed := append([]byte(id+"."+timestamp+"."), body...)
	mac := hmac.New(sha256.New, k.secret)
	mac.Write(signed)
	expected := mac.Sum(nil)
	for _, entry := range strings.Split(signatures, " ") {
		version, signature, _ := strings.Cut(entry, ",")
		given, err := base64.StdEncoding.DecodeString(signature)
		if err != nil {
			continue
		}
		if version == "v1" && k.secret != nil && hmac.Equal(given, expected) {
			return true
		}
		if version == "v1a" && k.publicKey != nil && ed25519.Verify(k.publicKey, signed, given) {
			return true
		}
	}
	return false
}

// chains holds, per Idemgate-Order-Key, the run key handled last.
type chains struct {
	mu   sync.Mutex
	last map[string]string
}

// check notes runKey as its order key's last run. An ordered run names the
// run of its key the worker finished just before it (Idemgate-Order-Previous);
// when that is not the one handled here last, a run of the key was not
// handled here (skipped, dead, or never received): it prints the gap. No
// previous on a key seen before: the key's state expired after the run
// retention, not a gap.
func (c *chains) check(h http.Header, runKey string) {
	key := h.Get("Idemgate-Order-Key") // percent-encoded by the worker: safe to print
	if key == "" {
		return
	}
	previous := h.Get("Idemgate-Order-Previous")
	c.mu.Lock()
	defer c.mu.Unlock()
	if last := c.last[key]; previous != "" && last != "" && previous != last {
		fmt.Println("gap", key, "expected", last, "got", previous)
	}
	c.last[key] = runKey
}

// doTheWork is your code. run is the JSON object idemgate sends: run_id,
// provider, repo, action, number, delivery_id, attempt, and payload (the
// event as the provider sent it) when the provider keeps it.
func doTheWork(run map[string]any) error {
	return nil
}

func main() {
	var k keys
	// whpk_ and the base64 of 32 bytes, or the receiver stops here (the message never shows the value).
	if public := os.Getenv("IDEMGATE_DELIVER_PUBLIC_KEY"); public != "" {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(public, "whpk_"))
		if !strings.HasPrefix(public, "whpk_") || err != nil || len(raw) != ed25519.PublicKeySize {
			log.Fatal("IDEMGATE_DELIVER_PUBLIC_KEY must be a whpk_... public key (whpk_ and the base64 of 32 bytes)")
		}
		k.publicKey = ed25519.PublicKey(raw)
	}
	// One whsec_... value: whsec_ and base64, or the receiver stops here; needed unless a public key is given.
	if secret := os.Getenv("IDEMGATE_DELIVER_SECRET"); secret != "" || k.publicKey == nil {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if !strings.HasPrefix(secret, "whsec_") || err != nil || len(key) == 0 {
			log.Fatal("IDEMGATE_DELIVER_SECRET must be a whsec_... secret (whsec_ and base64)")
		}
		k.secret = key
	}
	port := os.Getenv("PORT")
	if port == "" {
		port = "8000"
	}
	var mu sync.Mutex
	handled := map[string]bool{} // run keys whose work is done
	orders := &chains{last: map[string]string{}}

	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
		if err != nil || r.Method != http.MethodPost || !verified(k, r.Header, body) {
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
		orders.check(r.Header, runKey)
		fmt.Println("handled", runKey)
		w.WriteHeader(http.StatusNoContent)
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:"+port, nil))
}
