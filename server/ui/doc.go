// Package ui is memosrt's playground page, served at /ui: plain HTML, CSS
// and JavaScript (index.html, app.js, style.css) embedded in the binary,
// nothing loaded from a CDN. The page reads the server's JSON APIs every
// 2 s (cubes; a cube's memories with their tier and heat, packs, adapters,
// transitions, jobs; the budgets) and acts through the same APIs: it chats
// with the chosen cube over POST /v1/generate and lists, for each answer,
// the memories its prompt carried (pack_memory_ids, retrieved_memory_ids);
// it adds, edits and deletes memories, queues an extraction job and runs a
// scheduler tick. It uses the bearer token the user gives it (kept in the
// browser's localStorage), so an access key sees and changes its own cube
// only, as everywhere else. Its files hold no data and are public (Public),
// each served with a Content-Security-Policy that allows the page's own
// scripts, styles and API only: no inline script or style, and the page
// sets every server text with textContent.
//
// Page writes the page (GET /ui), Assets serves it and its files (GET
// /ui/...). Both read only the embedded files: safe for concurrent use.
package ui
