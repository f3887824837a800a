"""HTTP routes, one module per concern; app.create_app includes them."""
