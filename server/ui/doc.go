// Package ui is memosrt's inspector page, served at /ui: plain HTML, CSS
// and JavaScript (index.html, app.js, style.css) embedded in the binary,
// nothing loaded from a CDN. The page reads the server's JSON APIs every
// 2 s with the bearer token the user gives it (kept in the browser's
// localStorage), so an access key sees its own cube only, as everywhere
// else; its files hold no data and are public (Public), each served with
// a Content-Security-Policy that allows the page's own scripts, styles and
// API only.
//
// Page writes the page (GET /ui), Assets serves it and its files (GET
// /ui/...). Both read only the embedded files: safe for concurrent use.
package ui
