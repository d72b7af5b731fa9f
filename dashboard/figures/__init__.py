"""Figure builders: plain functions from run data to plotly figures, testable without a browser."""
