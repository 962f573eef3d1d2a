"""The proxy's one config file: loading, validation that names file/entity/key, reload."""
