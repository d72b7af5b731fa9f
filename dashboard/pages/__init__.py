"""The dashboard's pages, one module each, registered with dash.register_page when the app is built."""
