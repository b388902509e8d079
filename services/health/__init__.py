"""The health watcher: hears every heartbeat, kills and respawns what stops on its machine."""
