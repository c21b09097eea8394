package status

import (
	"time"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/scheduler"
)

// Stats are the serving gauges (HTTP /api/ps and /metrics).
type Stats struct {
	Backend       string `json:"backend"`
	NCtx          int    `json:"n_ctx"`
	Slots         int    `json:"slots"`
	BusySlots     int    `json:"busy_slots"`
	Queued        int    `json:"queued"` // requests waiting for a slot
	ResidentPacks int    `json:"resident_packs"`
	ResidentCells int    `json:"resident_cells"`
	ResidentMax   int    `json:"resident_cells_budget"`
	PendingWrites int    `json:"pending_writes"`
	EngineActive  int    `json:"engine_active"` // requests in the engine's running batch
	EngineQueued  int    `json:"engine_queued"` // requests waiting for the engine's admission
	KVRAMBytes    int64  `json:"kv_ram_bytes"`
	KVDiskBytes   int64  `json:"kv_disk_bytes"`
	Packs         int    `json:"packs"`
	ConvPacks     int    `json:"conv_packs"`        // conversation packs stored
	ConvBytes     int64  `json:"conv_bytes"`        // their blob bytes (Options.ConvBytes bounds them)
	ConvEvicted   int64  `json:"conv_evicted"`      // conversation packs deleted over the budget since Open
	Fallbacks     int64  `json:"restore_fallbacks"` // stored packs that matched but were refused: the prompt was prefilled
	DiskBytes     int64  `json:"disk_bytes"`        // the data directory's files (Badger LSM and value log), bytes
	NoSpace       int64  `json:"no_space_refused"`  // writes refused since Open for want of disk space (ErrNoSpace)
	// ComposedPacks counts the tier packs a background job composed from
	// their members' chunks since Open (kvcache.Info.Composed).
	ComposedPacks int64 `json:"composed_packs"`
	// KVShared is the shared activation level (Options.KVShared): enabled,
	// up, and its hit, miss, put and error counts since Open.
	KVShared kvcache.SharedStats `json:"kv_shared"`
}

// PackStatus is a cube's activation tier: its stored packs (tier and
// conversation packs) and its resident pack.
type PackStatus struct {
	Cube     string          `json:"cube"`
	Packs    []kvcache.Info  `json:"packs"`
	Resident *ResidentStatus `json:"resident,omitempty"`
	// Levels gives each pack's activation level by id:
	// scheduler.LevelResident, LevelRAM (decompressed in the RAM LRU) or
	// LevelDisk (only the compressed blob in Badger).
	Levels        map[string]string `json:"levels"`
	ResidentCells int               `json:"resident_cells"` // all resident packs, cells of n_ctx
	NCtx          int               `json:"n_ctx"`
	Memories      int               `json:"memories,omitempty"` // in the pack just warmed
	WarmMs        float64           `json:"warm_ms,omitempty"`
}

// ResidentStatus is a pack held at the resident level.
type ResidentStatus struct {
	Seq     int       `json:"seq"`
	Tokens  int       `json:"tokens"`
	PackID  string    `json:"pack_id"`
	Created time.Time `json:"created"`
}

// Budgets are the OS's bounds next to what uses them now: what the
// playground page (serve's /ui) shows in its header. Bytes unless the name
// says cells.
type Budgets struct {
	TierKVBytes    int64 `json:"tier_kv_bytes"`         // committed tier packs of all cubes, decompressed KV bytes
	TierKVBudget   int64 `json:"tier_kv_budget"`        // scheduler.Options.KVBytes (Options.Tiers)
	ChunkBytes     int64 `json:"chunk_bytes"`           // memory chunks of all cubes, decompressed KV bytes (new chunks count them against TierKVBudget)
	RAMBytes       int64 `json:"ram_bytes"`             // decompressed pack states in the kvcache RAM LRU
	RAMBudget      int64 `json:"ram_budget"`            // Options.RAMBytes
	ConvBytes      int64 `json:"conv_bytes"`            // stored conversation packs, blob bytes
	ConvBudget     int64 `json:"conv_budget"`           // Options.ConvBytes
	ResidentCells  int   `json:"resident_cells"`        // cells of n_ctx held by resident packs
	ResidentBudget int   `json:"resident_cells_budget"` // Options.ResidentCells
	AdapterBytes   int64 `json:"adapter_bytes"`         // loaded adapters' tensor bytes
	AdapterBudget  int64 `json:"adapter_budget"`        // Options.AdapterBytes
}

// AdapterStatus is an adapter visible from a cube (the parametric tier)
// and whether it is loaded now.
type AdapterStatus struct {
	lora.Record
	Loaded bool `json:"loaded"`
	Refs   int  `json:"refs"` // requests holding it now
}

// Levels gives each of packs its activation level (PackStatus.Levels):
// resident for the pack whose id is resident ("" for none), else ram when
// its decompressed state is in the RAM LRU, else disk.
func Levels(packs []kvcache.Info, resident string) map[string]string {
	out := make(map[string]string, len(packs))
	for _, p := range packs {
		switch {
		case p.ID == resident:
			out[p.ID] = scheduler.LevelResident
		case p.InRAM:
			out[p.ID] = scheduler.LevelRAM
		default:
			out[p.ID] = scheduler.LevelDisk
		}
	}
	return out
}
