// Package safepath turns names (cubes, adapters, models) into paths under
// a root folder and proves that the result lies inside it.
//
// Every path that memosrt derives from a name it was given goes through
// Join, so that a name such as "..", "a/../../b" or one holding a NUL byte
// is an error, never a path outside the data directory: before this, a
// cube named ".." turned the parametric tier's cleanup into
// os.RemoveAll(<data dir>/adapters/..), the whole data directory.
//
// The functions are pure and safe for concurrent use.
package safepath
