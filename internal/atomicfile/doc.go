// Package atomicfile writes files so that their path holds either nothing
// (or the old content) or the whole new content, never a partial write.
package atomicfile
