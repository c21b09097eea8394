// Package serveclient is how the CLI's commands reach a `memosrt serve`
// running on their data directory (Badger lets one process open it, so
// they talk to the server instead): the server records its address, a
// local bearer token and its instance id in the directory (Publish, File);
// Find reads that record and returns a Client when that very server
// answers. A Client offers what the commands need over the server's HTTP
// API: memories, search, packs, tiers, generation (streamed), access keys
// and the online backup. Errors the server answers carry its message and
// HTTP status.
//
// Main types: Info, Client. A Client is safe for concurrent use but for
// UseModel, which sets the model later calls use.
package serveclient
