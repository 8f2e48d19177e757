package datav1

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MaxMultiItems is the most items one Multi call may carry; an instance
// refuses a larger one with InvalidArgument. The Go client never sends
// more. This file is written by hand; the rest of the package is
// generated.
const MaxMultiItems = 256

// CheckMulti refuses a Multi of more than MaxMultiItems items, naming
// the limit. (An item that is neither a write nor a get is that item's
// own InvalidArgument, not the whole call's.)
func CheckMulti(req *MultiRequest) error {
	if n := len(req.GetItems()); n > MaxMultiItems {
		return status.Errorf(codes.InvalidArgument, "a Multi carries at most %d items (MaxMultiItems), got %d", MaxMultiItems, n)
	}
	return nil
}

// ResultOf is the MultiResult of one item's answer: resp (a
// *WriteResponse or *GetResponse) or, when err is not nil, err's full
// gRPC status.
func ResultOf(resp any, err error) *MultiResult {
	if err != nil {
		return &MultiResult{Result: &MultiResult_Error{Error: status.Convert(err).Proto()}}
	}
	switch r := resp.(type) {
	case *WriteResponse:
		return &MultiResult{Result: &MultiResult_Write{Write: r}}
	case *GetResponse:
		return &MultiResult{Result: &MultiResult_Get{Get: r}}
	}
	return &MultiResult{Result: &MultiResult_Error{Error: status.New(codes.Internal, "no answer for this item").Proto()}}
}

// CheckStream checks one request of a Stream: at most MaxMultiItems calls.
func CheckStream(req *StreamRequest) error {
	if n := len(req.GetCalls()); n > MaxMultiItems {
		return status.Errorf(codes.InvalidArgument, "a Stream request carries at most %d calls (MaxMultiItems), got %d", MaxMultiItems, n)
	}
	return nil
}
