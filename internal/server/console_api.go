package server

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/api/rpccodec"
	"github.com/shardkit/shardkit/internal/auth"
	"github.com/shardkit/shardkit/internal/cluster"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/statusview"
	"github.com/shardkit/shardkit/proc"
	"github.com/shardkit/shardkit/schema"
	"github.com/shardkit/shardkit/tuple"
)

// consoleAPI is the JSON API under /api/v1/ that the web console and
// scripts use (docs/console.md). Every read and every operation is a gRPC
// call made to this instance's own gRPC port, so it passes the same
// interceptors as a call from the CLI: the role check of internal/auth's
// one method table (for the user the HTTP request was authenticated as),
// the forwarding of leader-only calls to group 0's leader, and the
// handler's own checks. The API re-implements none of them; it only
// converts JSON to requests and answers (and refusals) to JSON.
type consoleAPI struct {
	node *cluster.Node
	// conn is a connection to this instance's own gRPC port (with the
	// node's credentials on a secure instance: the user is then named in
	// auth.UserHeader, which an instance trusts only from a node).
	conn    func() (grpc.ClientConnInterface, error)
	secure  bool
	metrics *metricSampler
	peers   *peerMetrics
	log     *slog.Logger
	// login serves the password login of a secure instance (nil: plaintext).
	login *consoleLogin
}

// apiTimeout bounds one API call's gRPC calls (an expel waits up to
// expelWait for the instance to leave).
const (
	apiTimeout = 15 * time.Second
	expelWait  = 30 * time.Second
)

// maxBody bounds a POST's JSON body.
const maxBody = 4 << 10

func (a *consoleAPI) register(mux *http.ServeMux) {
	registerConsolePages(mux)
	if a.login != nil {
		a.login.register(mux)
	}
	mux.HandleFunc("GET /api/v1/session", a.session)
	mux.HandleFunc("GET /api/v1/spaces", a.spaces)
	mux.HandleFunc("GET /api/v1/spaces/{space}/count", a.count)
	mux.HandleFunc("GET /api/v1/spaces/{space}/tuple", a.get)
	mux.HandleFunc("GET /api/v1/spaces/{space}/range", a.rangeOf)
	mux.HandleFunc("GET /api/v1/spaces/{space}/scan", a.scan)
	mux.HandleFunc("GET /api/v1/buckets", a.buckets)
	mux.HandleFunc("GET /api/v1/rebalance", a.rebalance)
	mux.HandleFunc("GET /api/v1/metrics", a.metricsOne)
	mux.HandleFunc("GET /api/v1/metrics/cluster", a.metricsAll)
	mux.HandleFunc("GET /api/v1/health/cluster", a.healthAll)
	mux.HandleFunc("GET /api/v1/events", a.events)
	mux.HandleFunc("POST /api/v1/instances/{id}/expel", jsonOnly(a.expel))
	mux.HandleFunc("POST /api/v1/replicasets/{id}/weight", jsonOnly(a.setWeight))
	mux.HandleFunc("POST /api/v1/replicasets/{id}/lock", jsonOnly(a.setLocked))
	mux.HandleFunc("POST /api/v1/buckets/{bucket}/move", jsonOnly(a.moveBucket))
	mux.HandleFunc("POST /api/v1/buckets/{bucket}/pin", jsonOnly(a.pinBucket))
	mux.HandleFunc("POST /api/v1/reshard", jsonOnly(a.reshard))
}

// jsonOnly refuses a POST whose body is not declared JSON: a page of
// another site can send a form to this instance (a browser sends its
// client certificate along, and on a plaintext instance nothing is
// needed), but not a JSON body without the instance's leave (CORS), which
// it never gives.
func jsonOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); strings.TrimSpace(mt) != "application/json" {
			fail(w, status.Error(codes.InvalidArgument, "send the body as JSON, with Content-Type: application/json"))
			return
		}
		h(w, r)
	}
}

// session is /api/v1/session: who the console runs as, and the CSRF token
// its POSTs carry (a password login's).
func (a *consoleAPI) session(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{"secure": a.secure, "user": "", "role": "", "csrf": ""}
	if u := userOf(r.Context()); u != "" {
		out["user"] = u
		if role, ok := a.node.Meta().State().UserRole(u); ok {
			out["role"] = meta.RoleName(role)
		}
		if a.login != nil {
			if id := auth.SessionID(r); id != "" {
				hash := a.node.Meta().State().Users[u].GetPasswordHash()
				if sess, ok := a.login.sessions.Get(id, hash); ok && sess.User == u {
					out["csrf"] = sess.CSRF
				}
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// userOf is the user the request was authenticated as (auth.HTTPUser).
func userOf(ctx context.Context) string { return auth.HTTPUser(ctx) }

// callCtx is the context of the gRPC calls made for r: bounded, and on a
// secure instance carrying the user the request was authenticated as, so
// that the gRPC server checks the call for that user.
func (a *consoleAPI) callCtx(r *http.Request, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	if u := userOf(r.Context()); a.secure && u != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, auth.UserHeader, u)
	}
	return ctx, cancel
}

func (a *consoleAPI) clients() (clusterv1.ClusterServiceClient, datav1.DataServiceClient, datav1.ShardingServiceClient, error) {
	conn, err := a.conn()
	if err != nil {
		return nil, nil, nil, status.Errorf(codes.Unavailable, "this instance cannot reach its own gRPC port: %v", err)
	}
	return clusterv1.NewClusterServiceClient(conn), datav1.NewDataServiceClient(conn), datav1.NewShardingServiceClient(conn), nil
}

// apiError is the body of every refusal: the server's own message and
// its gRPC code's name.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// httpStatus maps a gRPC code to the HTTP status the API answers with.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted, codes.FailedPrecondition:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded, codes.Canceled:
		return http.StatusGatewayTimeout
	case codes.Unimplemented:
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}

// fail answers err: a gRPC status keeps its code and message (the
// server's own words); anything else is a bad request of the API's own.
func fail(w http.ResponseWriter, err error) {
	st, ok := status.FromError(err)
	if !ok {
		st = status.New(codes.InvalidArgument, err.Error())
	}
	writeJSON(w, httpStatus(st.Code()), apiError{Error: st.Message(), Code: st.Code().String()})
}

// badRequest is a refusal of the API's own (a malformed parameter).
func badRequest(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// writeProto answers a proto message as JSON (protojson, field names as
// in the .proto, zero values included).
func writeProto(w http.ResponseWriter, m proto.Message) {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		fail(w, status.Errorf(codes.Internal, "encoding the answer: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// decodeBody reads a POST's JSON body into v: one object of v's fields
// only, at most maxBody bytes. The error says what was wrong.
func decodeBody(body io.Reader, v any) error {
	dec := json.NewDecoder(io.LimitReader(body, maxBody+1))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return badRequest("the request body is empty: send a JSON object")
		}
		return badRequest("the request body is not the JSON object expected: %v", err)
	}
	if dec.More() {
		return badRequest("the request body holds more than one JSON value")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("the request body holds more than one JSON value, or more than %d bytes", maxBody)
	}
	return nil
}

// ---- spaces and tuples

// spaceView is a space as the console shows it.
type spaceView struct {
	Name        string        `json:"name"`
	ID          uint32        `json:"id"`
	Fields      []fieldView   `json:"fields"`
	PrimaryKey  []string      `json:"primary_key"`
	ShardingKey []string      `json:"sharding_key"`
	Schema      uint64        `json:"schema_version"`
	compiled    *schema.Space // for the key's checks and bucket
}

type fieldView struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
}

func viewSpace(sp *datav1.Space) (spaceView, error) {
	c, err := schema.CompileAPI(sp)
	if err != nil {
		return spaceView{}, status.Errorf(codes.Internal, "space %q: %v", sp.GetName(), err)
	}
	v := spaceView{Name: sp.GetName(), ID: sp.GetId(), Schema: sp.GetSchemaVersion(), compiled: c,
		Fields: []fieldView{}, PrimaryKey: []string{}, ShardingKey: []string{}}
	f := c.Format()
	for _, fd := range f {
		v.Fields = append(v.Fields, fieldView{Name: fd.Name, Type: fd.Type.String(), Nullable: fd.Nullable})
	}
	for _, i := range c.PrimaryKey() {
		v.PrimaryKey = append(v.PrimaryKey, f[i].Name)
	}
	for _, i := range c.ShardingKey() {
		v.ShardingKey = append(v.ShardingKey, f[i].Name)
	}
	return v, nil
}

func (a *consoleAPI) spaces(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.callCtx(r, apiTimeout)
	defer cancel()
	_, dc, _, err := a.clients()
	if err != nil {
		fail(w, err)
		return
	}
	resp, err := dc.ListSpaces(ctx, &datav1.ListSpacesRequest{})
	if err != nil {
		fail(w, err)
		return
	}
	out := struct {
		Spaces        []spaceView `json:"spaces"`
		SchemaVersion uint64      `json:"schema_version"`
	}{Spaces: []spaceView{}, SchemaVersion: resp.GetSchemaVersion()}
	for _, sp := range resp.GetSpaces() {
		v, err := viewSpace(sp)
		if err != nil {
			fail(w, err)
			return
		}
		out.Spaces = append(out.Spaces, v)
	}
	writeJSON(w, http.StatusOK, out)
}

// space finds the space named in r's path (through the data service, so
// that the caller's role is checked as for `space list`).
func (a *consoleAPI) space(ctx context.Context, dc datav1.DataServiceClient, r *http.Request) (spaceView, error) {
	name := r.PathValue("space")
	resp, err := dc.ListSpaces(ctx, &datav1.ListSpacesRequest{})
	if err != nil {
		return spaceView{}, err
	}
	for _, sp := range resp.GetSpaces() {
		if sp.GetName() == name {
			return viewSpace(sp)
		}
	}
	return spaceView{}, status.Errorf(codes.NotFound, "no space %q", name)
}

func (a *consoleAPI) count(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.callCtx(r, apiTimeout)
	defer cancel()
	_, dc, _, err := a.clients()
	if err != nil {
		fail(w, err)
		return
	}
	sp, err := a.space(ctx, dc, r)
	if err != nil {
		fail(w, err)
		return
	}
	rt, err := dc.GetRouting(ctx, &datav1.GetRoutingRequest{})
	if err != nil {
		fail(w, err)
		return
	}
	args := tuple.AppendTuple(nil, tuple.Tuple{tuple.String(sp.Name)})
	// As `shardkit space count`: the built-in count on every replicaset's
	// leader, summed once every bucket is counted exactly once.
	n, err := proc.CountCluster(ctx, rt.GetBucketCount(), func(ctx context.Context) ([]tuple.Tuple, error) {
		resp, err := dc.MapCall(ctx, &datav1.MapCallRequest{Procedure: "count_buckets", Args: args, Mode: datav1.Mode_MODE_RW})
		if err != nil {
			return nil, err
		}
		out := make([]tuple.Tuple, 0, len(resp.GetResults()))
		for _, res := range resp.GetResults() {
			if res.GetError() != "" {
				return nil, status.Errorf(codes.Unavailable, "replicaset %s: %s", res.GetReplicasetId(), res.GetError())
			}
			t, err := tuple.DecodeTuple(res.GetResult())
			if err != nil {
				return nil, status.Errorf(codes.Internal, "replicaset %s's count: %v", res.GetReplicasetId(), err)
			}
			out = append(out, t)
		}
		return out, nil
	})
	switch {
	case errors.Is(err, proc.ErrCountInFlux):
		fail(w, status.Error(codes.Unavailable, err.Error()))
		return
	case err != nil:
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"space": sp.Name, "count": n})
}

// parseMode reads ?mode= (rw, the default, or ro).
func parseMode(r *http.Request) (datav1.Mode, error) {
	switch m := r.URL.Query().Get("mode"); m {
	case "", "rw":
		return datav1.Mode_MODE_RW, nil
	case "ro":
		return datav1.Mode_MODE_RO, nil
	default:
		return 0, badRequest("mode %q: want rw (the leader, linearizable) or ro (any replica)", m)
	}
}

// tupleView is a tuple as the API shows it.
type tupleView struct {
	Tuple   json.RawMessage `json:"tuple"`
	Version uint64          `json:"version"`
	Bucket  uint32          `json:"bucket,omitempty"`
}

func viewTuple(b []byte, version uint64, bucket uint32) (tupleView, error) {
	t, err := tuple.DecodeTuple(b)
	if err != nil {
		return tupleView{}, status.Errorf(codes.Internal, "a stored tuple does not decode: %v", err)
	}
	return tupleView{Tuple: tuple.AppendJSON(nil, t), Version: version, Bucket: bucket}, nil
}

type readInfoView struct {
	ReplicasetID string `json:"replicaset_id"`
	InstanceID   string `json:"instance_id"`
	Leader       bool   `json:"leader"`
	AppliedIndex uint64 `json:"applied_index"`
	LagEntries   uint64 `json:"lag_entries"`
}

func viewInfo(i *datav1.ReadInfo) readInfoView {
	return readInfoView{ReplicasetID: i.GetReplicasetId(), InstanceID: i.GetInstanceId(), Leader: i.GetLeader(),
		AppliedIndex: i.GetAppliedIndex(), LagEntries: i.GetLagEntries()}
}

// get answers a key's tuple: ?key=<JSON array of the primary key's
// values>&mode=rw|ro.
func (a *consoleAPI) get(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.callCtx(r, apiTimeout)
	defer cancel()
	mode, err := parseMode(r)
	if err != nil {
		fail(w, err)
		return
	}
	_, dc, _, err := a.clients()
	if err != nil {
		fail(w, err)
		return
	}
	sp, err := a.space(ctx, dc, r)
	if err != nil {
		fail(w, err)
		return
	}
	raw := r.URL.Query().Get("key")
	if raw == "" {
		fail(w, badRequest("no key: pass ?key= a JSON array of %s", strings.Join(sp.PrimaryKey, ", ")))
		return
	}
	key, err := tuple.ParseJSONKey([]byte(raw), sp.compiled.KeyFormat())
	if err != nil {
		fail(w, badRequest("key %s: %v", raw, err))
		return
	}
	rt, err := dc.GetRouting(ctx, &datav1.GetRoutingRequest{})
	if err != nil {
		fail(w, err)
		return
	}
	bucket, err := sp.compiled.BucketOf(key, rt.GetBucketCount())
	if err != nil {
		fail(w, badRequest("key %s: %v", raw, err))
		return
	}
	resp, err := dc.Get(ctx, &datav1.GetRequest{Space: sp.Name, Key: tuple.AppendTuple(nil, key), Mode: mode, Bucket: bucket})
	if err != nil {
		fail(w, err)
		return
	}
	out := map[string]any{"space": sp.Name, "found": resp.GetFound(), "bucket": bucket, "info": viewInfo(resp.GetInfo())}
	if resp.GetFound() {
		tv, err := viewTuple(resp.GetTuple(), resp.GetVersion(), 0)
		if err != nil {
			fail(w, err)
			return
		}
		out["tuple"], out["version"] = tv.Tuple, tv.Version
	}
	writeJSON(w, http.StatusOK, out)
}

// pageParams are the paging parameters of range and scan: ?limit=
// (default 50, at most 1000) and ?after= (a cursor the previous page
// returned as next_after).
func pageParams(r *http.Request) (limit uint32, after []byte, err error) {
	q := r.URL.Query()
	limit = 50
	if s := q.Get("limit"); s != "" {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n == 0 || n > 1000 {
			return 0, nil, badRequest("limit %q: want a number from 1 to 1000", s)
		}
		limit = uint32(n)
	}
	if s := q.Get("after"); s != "" {
		if after, err = base64.RawURLEncoding.DecodeString(s); err != nil {
			return 0, nil, badRequest("after %q: not a cursor this API returned (next_after)", s)
		}
	}
	return limit, after, nil
}

// parseBucket reads a bucket number in 1..count.
func parseBucket(s string, count uint32) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 || (count != 0 && n > uint64(count)) {
		return 0, badRequest("bucket %q: want a number from 1 to %d", s, count)
	}
	return uint32(n), nil
}

// maxScanCalls bounds the Range calls of one scan page.
const maxScanCalls = 64

type pageView struct {
	Space     string       `json:"space"`
	Tuples    []tupleView  `json:"tuples"`
	More      bool         `json:"more"`
	NextAfter string       `json:"next_after,omitempty"`
	Next      uint32       `json:"next_bucket,omitempty"`
	Info      readInfoView `json:"info"`
}

// rangeOf answers a page of one bucket's tuples in key order:
// ?bucket=N&limit=&after=&mode=.
func (a *consoleAPI) rangeOf(w http.ResponseWriter, r *http.Request) {
	a.page(w, r, false)
}

// scan answers a page of a scan of the whole space in (bucket, key)
// order: ?bucket= (where to start, default 1)&after=&limit=&mode=.
func (a *consoleAPI) scan(w http.ResponseWriter, r *http.Request) {
	a.page(w, r, true)
}

func (a *consoleAPI) page(w http.ResponseWriter, r *http.Request, scan bool) {
	ctx, cancel := a.callCtx(r, apiTimeout)
	defer cancel()
	mode, err := parseMode(r)
	if err != nil {
		fail(w, err)
		return
	}
	limit, after, err := pageParams(r)
	if err != nil {
		fail(w, err)
		return
	}
	_, dc, _, err := a.clients()
	if err != nil {
		fail(w, err)
		return
	}
	sp, err := a.space(ctx, dc, r)
	if err != nil {
		fail(w, err)
		return
	}
	rt, err := dc.GetRouting(ctx, &datav1.GetRoutingRequest{})
	if err != nil {
		fail(w, err)
		return
	}
	b := r.URL.Query().Get("bucket")
	if b == "" && scan {
		b = "1"
	}
	if b == "" {
		fail(w, badRequest("no bucket: pass ?bucket= a number from 1 to %d", rt.GetBucketCount()))
		return
	}
	bucket, err := parseBucket(b, rt.GetBucketCount())
	if err != nil {
		fail(w, err)
		return
	}
	// A scan's call stops at the end of the run of buckets active on one
	// replicaset, so it may return few tuples, or none, with more to
	// come: calls follow each other until the page is full, the space
	// ends, or maxScanCalls were made.
	out := pageView{Space: sp.Name, Tuples: []tupleView{}}
	var resp *datav1.RangeResponse
	var last []byte
	for calls := 0; ; calls++ {
		resp, err = dc.Range(ctx, &datav1.RangeRequest{Space: sp.Name, Bucket: bucket, After: after,
			Limit: limit - uint32(len(out.Tuples)), Mode: mode, Scan: scan})
		if err != nil {
			fail(w, err)
			return
		}
		for _, vt := range resp.GetTuples() {
			tb := vt.GetBucket()
			if tb == 0 {
				tb = bucket
			}
			tv, err := viewTuple(vt.GetTuple(), vt.GetVersion(), tb)
			if err != nil {
				fail(w, err)
				return
			}
			out.Tuples = append(out.Tuples, tv)
			last = vt.GetTuple()
		}
		if !scan || !resp.GetMore() || len(out.Tuples) >= int(limit) || calls+1 >= maxScanCalls {
			break
		}
		bucket, after = resp.GetNextBucket(), resp.GetNextAfter()
	}
	out.More, out.Info = resp.GetMore(), viewInfo(resp.GetInfo())
	switch {
	case scan && resp.GetMore():
		out.Next = resp.GetNextBucket()
		out.NextAfter = base64.RawURLEncoding.EncodeToString(resp.GetNextAfter())
	case resp.GetMore() && last != nil:
		// A range resumes past the last tuple's primary key.
		t, err := tuple.DecodeTuple(last)
		if err == nil {
			var key []tuple.Value
			if key, err = sp.compiled.KeyOf(t); err == nil {
				out.Next = bucket
				out.NextAfter = base64.RawURLEncoding.EncodeToString(tuple.AppendTuple(nil, key))
			}
		}
		if err != nil {
			fail(w, status.Errorf(codes.Internal, "the page's last key: %v", err))
			return
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// ---- buckets and the rebalancer

// bucketsView is the bucket map as the console's grid draws it: the
// placement as ranges of buckets, the replicasets with their balance, the
// moves in flight and the pinned buckets.
type bucketsView struct {
	BucketCount     uint32            `json:"bucket_count"`
	ShardingVersion uint64            `json:"sharding_version"`
	Ranges          []bucketRangeView `json:"ranges"`
	Replicasets     json.RawMessage   `json:"replicasets"`
	Moves           json.RawMessage   `json:"moves"`
	BucketsToMove   uint32            `json:"buckets_to_move"`
	Stale           bool              `json:"stale"`
	StaleReason     string            `json:"stale_reason,omitempty"`
}

type bucketRangeView struct {
	First        uint32 `json:"first"`
	Last         uint32 `json:"last"`
	ReplicasetID string `json:"replicaset_id"`
}

func (a *consoleAPI) buckets(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.callCtx(r, apiTimeout)
	defer cancel()
	_, dc, sc, err := a.clients()
	if err != nil {
		fail(w, err)
		return
	}
	rt, err := dc.GetRouting(ctx, &datav1.GetRoutingRequest{})
	if err != nil {
		fail(w, err)
		return
	}
	rb, err := sc.RebalanceStatus(ctx, &datav1.RebalanceStatusRequest{})
	if err != nil {
		fail(w, err)
		return
	}
	out := bucketsView{BucketCount: rt.GetBucketCount(), ShardingVersion: rt.GetShardingVersion(), Ranges: []bucketRangeView{},
		BucketsToMove: rb.GetBucketsToMove(), Stale: rb.GetStale(), StaleReason: rb.GetStaleReason()}
	for _, br := range rt.GetBuckets() {
		out.Ranges = append(out.Ranges, bucketRangeView{First: br.GetFirst(), Last: br.GetLast(), ReplicasetID: br.GetReplicasetId()})
	}
	// The replicasets and moves as RebalanceStatus has them (protojson).
	if out.Replicasets, err = protoList(rb.GetReplicasets()); err == nil {
		out.Moves, err = protoList(rb.GetMoves())
	}
	if err != nil {
		fail(w, status.Errorf(codes.Internal, "encoding the answer: %v", err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// protoList encodes messages as a JSON array with protojson.
func protoList[M proto.Message](ms []M) (json.RawMessage, error) {
	out := []byte{'['}
	for i, m := range ms {
		if i > 0 {
			out = append(out, ',')
		}
		b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return append(out, ']'), nil
}

func (a *consoleAPI) rebalance(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.callCtx(r, apiTimeout)
	defer cancel()
	_, _, sc, err := a.clients()
	if err != nil {
		fail(w, err)
		return
	}
	rb, err := sc.RebalanceStatus(ctx, &datav1.RebalanceStatusRequest{})
	if err != nil {
		fail(w, err)
		return
	}
	writeProto(w, rb)
}

// The bodies of the operations' POSTs (decodeBody).
type (
	expelBody struct {
		Force       bool `json:"force"`
		LoseBuckets bool `json:"lose_buckets"`
	}
	weightBody struct {
		Weight *uint32 `json:"weight"`
	}
	lockBody struct {
		Locked *bool `json:"locked"`
	}
	moveBody struct {
		To string `json:"to"`
	}
	pinBody struct {
		Pinned *bool `json:"pinned"`
	}
	reshardBody struct {
		Step string `json:"step"`
	}
)

// ---- operations: each a gRPC call of the operator's, through the same
// interceptors (role, forwarding to the leader) as from the CLI.

func (a *consoleAPI) expel(w http.ResponseWriter, r *http.Request) {
	var body expelBody
	if err := decodeBody(r.Body, &body); err != nil {
		fail(w, err)
		return
	}
	ctx, cancel := a.callCtx(r, expelWait+5*time.Second)
	defer cancel()
	cc, _, _, err := a.clients()
	if err != nil {
		fail(w, err)
		return
	}
	resp, err := cc.Expel(ctx, &clusterv1.ExpelRequest{InstanceId: r.PathValue("id"), Force: body.Force,
		LoseBuckets: body.LoseBuckets, TimeoutMs: expelWait.Milliseconds()})
	if err != nil {
		fail(w, err)
		return
	}
	writeProto(w, resp)
}

func (a *consoleAPI) setWeight(w http.ResponseWriter, r *http.Request) {
	var body weightBody
	if err := decodeBody(r.Body, &body); err != nil {
		fail(w, err)
		return
	}
	if body.Weight == nil {
		fail(w, badRequest(`no weight: send {"weight": N} (0 drains the replicaset)`))
		return
	}
	a.sharding(w, r, func(ctx context.Context, sc datav1.ShardingServiceClient) (proto.Message, error) {
		return sc.SetWeight(ctx, &datav1.SetWeightRequest{ReplicasetId: r.PathValue("id"), Weight: *body.Weight})
	})
}

func (a *consoleAPI) setLocked(w http.ResponseWriter, r *http.Request) {
	var body lockBody
	if err := decodeBody(r.Body, &body); err != nil {
		fail(w, err)
		return
	}
	if body.Locked == nil {
		fail(w, badRequest(`no locked: send {"locked": true} or {"locked": false}`))
		return
	}
	a.sharding(w, r, func(ctx context.Context, sc datav1.ShardingServiceClient) (proto.Message, error) {
		return sc.SetLocked(ctx, &datav1.SetLockedRequest{ReplicasetId: r.PathValue("id"), Locked: *body.Locked})
	})
}

func (a *consoleAPI) moveBucket(w http.ResponseWriter, r *http.Request) {
	var body moveBody
	if err := decodeBody(r.Body, &body); err != nil {
		fail(w, err)
		return
	}
	b, err := parseBucket(r.PathValue("bucket"), 0)
	if err != nil {
		fail(w, err)
		return
	}
	if body.To == "" {
		fail(w, badRequest(`no destination: send {"to": "<replicaset id>"}`))
		return
	}
	a.sharding(w, r, func(ctx context.Context, sc datav1.ShardingServiceClient) (proto.Message, error) {
		return sc.MoveBucket(ctx, &datav1.MoveBucketRequest{Bucket: b, To: body.To})
	})
}

func (a *consoleAPI) pinBucket(w http.ResponseWriter, r *http.Request) {
	var body pinBody
	if err := decodeBody(r.Body, &body); err != nil {
		fail(w, err)
		return
	}
	b, err := parseBucket(r.PathValue("bucket"), 0)
	if err != nil {
		fail(w, err)
		return
	}
	if body.Pinned == nil {
		fail(w, badRequest(`no pinned: send {"pinned": true} or {"pinned": false}`))
		return
	}
	a.sharding(w, r, func(ctx context.Context, sc datav1.ShardingServiceClient) (proto.Message, error) {
		return sc.PinBucket(ctx, &datav1.PinBucketRequest{Bucket: b, Pinned: *body.Pinned})
	})
}

// reshardSteps are the steps of `shardkit reshard`, by the names it takes.
var reshardSteps = map[string]datav1.ReshardStep{
	"plan":    datav1.ReshardStep_RESHARD_STEP_PLAN,
	"start":   datav1.ReshardStep_RESHARD_STEP_START,
	"copy":    datav1.ReshardStep_RESHARD_STEP_COPY,
	"finish":  datav1.ReshardStep_RESHARD_STEP_FINISH,
	"cleanup": datav1.ReshardStep_RESHARD_STEP_CLEANUP,
}

func (a *consoleAPI) reshard(w http.ResponseWriter, r *http.Request) {
	var body reshardBody
	if err := decodeBody(r.Body, &body); err != nil {
		fail(w, err)
		return
	}
	step, ok := reshardSteps[body.Step]
	if !ok {
		fail(w, badRequest("step %q: want plan, start, copy, finish or cleanup", body.Step))
		return
	}
	a.sharding(w, r, func(ctx context.Context, sc datav1.ShardingServiceClient) (proto.Message, error) {
		return sc.Reshard(ctx, &datav1.ReshardRequest{Step: step})
	})
}

// sharding makes one ShardingService call and answers its result.
func (a *consoleAPI) sharding(w http.ResponseWriter, r *http.Request, call func(context.Context, datav1.ShardingServiceClient) (proto.Message, error)) {
	ctx, cancel := a.callCtx(r, apiTimeout)
	defer cancel()
	_, _, sc, err := a.clients()
	if err != nil {
		fail(w, err)
		return
	}
	resp, err := call(ctx, sc)
	if err != nil {
		fail(w, err)
		return
	}
	writeProto(w, resp)
}

// ---- live cluster status (Server-Sent Events)

// clusterEvent is one event of /api/v1/events: the status as
// /api/v1/cluster has it, and whether the serving instance is in the
// cluster now (stale: it is not, and the status is its last known view).
type clusterEvent struct {
	Time   string           `json:"time"`
	Stale  bool             `json:"stale"`
	Reason string           `json:"reason,omitempty"`
	Status *statusview.View `json:"status,omitempty"`
	User   string           `json:"user,omitempty"`
}

// eventPeriod is how often /api/v1/events sends the status when nothing
// changes (a change in group 0 sends it at once).
const eventPeriod = 2 * time.Second

func (a *consoleAPI) snapshot(r *http.Request) clusterEvent {
	ev := clusterEvent{Time: time.Now().UTC().Format(time.RFC3339Nano), User: userOf(r.Context())}
	if why := notReady(a.node); why != "" {
		ev.Stale, ev.Reason = true, why
	}
	ctx, cancel := a.callCtx(r, eventPeriod)
	defer cancel()
	cc, _, _, err := a.clients()
	var resp *clusterv1.GetStatusResponse
	if err == nil {
		resp, err = cc.GetStatus(ctx, &clusterv1.GetStatusRequest{})
	}
	if err != nil {
		ev.Stale = true
		if ev.Reason == "" {
			ev.Reason = status.Convert(err).Message()
			if status.Code(err) == codes.DeadlineExceeded {
				ev.Reason = fmt.Sprintf("this instance could not confirm the cluster's status within %s (has group 0 lost its quorum?)", eventPeriod)
			}
		}
		return ev
	}
	v := statusview.FromProto(resp, false)
	if v.NoQuorum() {
		ev.Stale = true
		if ev.Reason == "" {
			ev.Reason = v.QuorumSummary()
		}
	}
	ev.Status = &v
	return ev
}

func (a *consoleAPI) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		fail(w, status.Error(codes.Unimplemented, "this connection cannot stream events"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	tick := time.NewTicker(eventPeriod)
	defer tick.Stop()
	for {
		changed := a.node.Meta().Changed()
		ev := a.snapshot(r)
		b, err := json.Marshal(ev)
		if err != nil {
			return
		}
		if _, err := fmt.Fprintf(w, "event: cluster\ndata: %s\n\n", b); err != nil {
			return
		}
		fl.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		case <-changed:
			// Group 0 changed; changes come in bursts (a grade's steps):
			// let a burst settle a little before the next snapshot.
			select {
			case <-r.Context().Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// newConsoleAPI makes the console's API for node: its connection to this
// instance's own gRPC port at advertise (closed by the returned func) and
// its metric sampler, which runs until ctx ends.
func newConsoleAPI(ctx context.Context, node *cluster.Node, reg *prometheus.Registry, sec *security, sessions *auth.Sessions, advertise string, log *slog.Logger) (*consoleAPI, func(), error) {
	creds := insecure.NewCredentials()
	var peerTLS *tls.Config
	if sec.secure() {
		creds = sec.peer
		peerTLS = sec.srv.ClientConfig()
	}
	conn, err := grpc.NewClient(advertise, grpc.WithTransportCredentials(creds), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rpccodec.Codec{})))
	if err != nil {
		return nil, nil, fmt.Errorf("the console's connection to %s: %w", advertise, err)
	}
	sampler := newMetricSampler(reg)
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sampler.run(sctx)
	}()
	a := &consoleAPI{
		node:    node,
		conn:    func() (grpc.ClientConnInterface, error) { return conn, nil },
		secure:  sec.secure(),
		metrics: sampler,
		peers:   newPeerMetrics(peerTLS),
		log:     log,
	}
	if sessions != nil {
		a.login = &consoleLogin{node: node, sessions: sessions, limiter: auth.NewLoginLimiter(nil), log: log}
	}
	return a, func() {
		stop()
		<-done
		_ = conn.Close()
	}, nil
}
