package datav1

import "google.golang.org/grpc/status"

// RedirectOf returns the Redirect detail of an answer (nil when it has
// none): the typed "not here" of a data-layer call (WRONG_BUCKET,
// NOT_LEADER, BUCKET_MOVING) that clients and routers follow. This file
// is written by hand; the rest of the package is generated.
func RedirectOf(err error) *Redirect {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if rd, ok := d.(*Redirect); ok {
			return rd
		}
	}
	return nil
}
