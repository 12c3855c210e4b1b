"""`reach soak`: the stack under steady traffic and churn for N minutes, sampled for growth and loss."""
