"""A store's search: keyword, semantic and hybrid ranking of one session or many, and filters over them."""
