// Package errkind sorts errors into a few kinds that say what a caller can
// do about them: fix the request (Invalid, TooLarge), look elsewhere
// (NotFound), retry later (Busy, Unavailable), free disk space (NoSpace),
// and so on. The server turns a kind into an HTTP status; an app embedding
// package memosrt reads it with memosrt.KindOf.
//
// A package declares its sentinel errors with New, which gives each a kind
// while keeping its text and its identity under errors.Is:
//
//	var ErrNotFound = errkind.New(errkind.NotFound, "textmem: memory not found")
//
// Of finds the kind of any error that wraps such a sentinel, or of any error
// type with a Kind() Kind method, through fmt.Errorf("%w") and errors.Join.
//
// FieldError is the one error type of the package: a request invalid
// because of one named field, of kind Invalid. The root package and the
// packages below it return it, so the server reads the field from any of
// them with one errors.As.
//
// The package imports none of this module's packages, so every one of them
// may import it.
package errkind
