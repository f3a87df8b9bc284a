"""specdec_lib: the library under the specdec course."""
