"""Results: the recorder, result tables, ideal references and bounds, plots and the HTML report."""
