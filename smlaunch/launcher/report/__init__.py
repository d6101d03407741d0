"""What a run reports: report.json and its summary (`job_report`), the plots (`render`), and the
advisor's reading of them."""
